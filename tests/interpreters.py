"""Find the CPython interpreters 3.8 to 3.13 on this machine (pyenv, then PATH)."""
import glob
import os
import shutil
import subprocess

VERSIONS = ["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"]


def _works(path):
    try:
        return subprocess.run([path, "-c", "import sys"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_interpreter(version):
    """The path of a working python<version>, or None."""
    roots = [os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")]
    candidates = []
    for root in roots:
        candidates += sorted(glob.glob(os.path.join(root, "versions", version + ".*", "bin",
                                                    "python" + version)), reverse=True)
    on_path = shutil.which("python" + version)
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        if _works(candidate):
            return candidate
    return None
