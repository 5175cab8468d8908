"""Many loops (SPEC 19): rooda does not schedule; the README's recipes start loops where
schedulers already run them. Sessions record where they ran, so one shared log directory
holds many loops, `status --all` says which is which and `report --all` tells them all."""
import os
import subprocess

from conftest import ROOT, git


def test_the_readmes_xargs_recipe_runs_three_loops_into_one_log_directory(tmp_path, agent):
    # The README's recipe as it is written, with HOME in a scratch directory: ~/src holds
    # three repositories, ~/tools/rooda this rooda; the fake agent says SUCCESS at once.
    readme = open(os.path.join(ROOT, "README.md")).read()
    recipe = readme.split("**On one machine**")[1].split("```sh\n")[1].split("```")[0].splitlines()
    assert len(recipe) == 3 and recipe[0].startswith("ls -d ~/src/*/ | xargs -P 2")
    home = tmp_path / "home"
    for name in ("alpha", "beta", "gamma"):
        repo = home / "src" / name
        repo.mkdir(parents=True)
        git(repo, "init", "-q")
    (home / "tools" / "rooda").mkdir(parents=True)
    os.symlink(os.path.join(ROOT, "rooda.py"), home / "tools" / "rooda" / "rooda.py")
    agent.script({"actions": [{"out": "did it <promise>SUCCESS</promise>\n"}]})
    env = dict(os.environ, HOME=str(home), ROODA_LOOP_AI_CMD=agent.cmd, **agent.env)
    ran = [subprocess.run(["sh", "-c", line], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120) for line in recipe]
    assert [done.returncode for done in ran] == [0, 0, 0], [done.stderr for done in ran]
    rows = ran[1].stdout.decode().splitlines()
    # Each session's row ends with the directory it ran in; all three completed.
    assert sorted(row.rsplit("  in ", 1)[1] for row in rows) == [
        str(home / "src" / name) for name in ("alpha", "beta", "gamma")]
    assert len(rows) == 3 and all(" completed " in row for row in rows)  # (the agents share a call counter)
    page = (home / "night.html").read_text()  # the report of all three, a lane each
    assert page.count("<span class=badge") == 3 and all("%s · build" % name in page for name in
                                                          ("alpha", "beta", "gamma"))
