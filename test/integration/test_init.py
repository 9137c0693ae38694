"""Users build against dlrun the usual way: install it into a prefix, `dlrun init` a project,
build it with find_package(dlrun), run it with `dlrun local --nproc 2`."""
import os
import re
import subprocess
import unittest

from harness import BUILD_DIR, DlrunTestCase


class InstallAndInit(DlrunTestCase):
    def test_installed_dlrun_builds_and_runs_a_new_project(self):
        prefix = os.path.join(self.tmp, "prefix")
        r = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", prefix], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        dlrun = os.path.join(prefix, "bin", "dlrun")
        project = os.path.join(self.tmp, "myproject")
        r = subprocess.run([dlrun, "init", project], capture_output=True, text=True, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"-DCMAKE_PREFIX_PATH={prefix}", r.stdout)
        self.assertEqual(sorted(os.listdir(project)), ["CMakeLists.txt", "README.md", "job.toml", "train.cpp"])
        with open(os.path.join(project, "README.md")) as f:
            self.assertIn(f"-DCMAKE_PREFIX_PATH={prefix} ", f.read())
        # The documentation is installed with it.
        for doc in ("README.md", "local.md", "job-toml.md", "scheduling.md"):
            self.assertTrue(os.path.isfile(os.path.join(prefix, "share", "doc", "dlrun", doc)), doc)
        again = subprocess.run([dlrun, "init", project], capture_output=True, text=True, env=self.env)
        self.assertEqual(again.returncode, 2)
        self.assertIn("already exists; nothing was written (--force overwrites)", again.stderr)
        build = os.path.join(project, "build")
        for cmd in (["cmake", "-S", project, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}"], ["cmake", "--build", build]):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            self.assertIn("CMAKE_BUILD_TYPE:STRING=Release", f.read())  # optimised by default
        r = subprocess.run([dlrun, "local", "--nproc", "2", os.path.join(build, "train")], capture_output=True,
                           text=True, env=self.env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertRegex(r.stdout.splitlines()[-1], r"^\[0\] final_loss=\d+\.\d{4}$")
        self.assertIn("[0] epoch 5: loss", r.stdout)
        self.assertEqual(r.stderr.count("checkpoint of step"), 5, r.stderr)  # one at every epoch's end
        # Submitted, it keeps its checkpoints where the job file's checkpoint_dir says (it
        # ignored DLRUN_CHECKPOINT_DIR), and a second submission resumes from them.
        with open(os.path.join(project, "job.toml")) as f:
            job = f.read().replace('command = ["build/train"]', 'command = ["build/train"]\ncheckpoint_dir = "ckpts"')
        with open(os.path.join(project, "kept.toml"), "w") as f:
            f.write(job)
        for attempt in ("first", "second"):
            r = subprocess.run([dlrun, "submit", "--wait", os.path.join(project, "kept.toml")], capture_output=True,
                               text=True, env=self.env, timeout=300)
            self.assertEqual(r.returncode, 0, attempt + r.stdout[-3000:] + r.stderr[-3000:])
        self.assertEqual(len([d for d in os.listdir(os.path.join(project, "ckpts")) if d.startswith("step-")]), 3)
        job = re.search(r"Submitted job (\d+)", r.stdout).group(1)
        logs = subprocess.run([dlrun, "logs", job], capture_output=True, text=True, env=self.env).stdout
        self.assertRegex(logs, r"\[0\] resumed from step 160 \(epoch 6\), saved by 2 rank\(s\); now 2 rank\(s\)\n")
        self.assertRegex(logs, r"\[0\] final_loss=(?!0\.0000)\d+\.\d{4}\n")  # the loss it was saved with

    def test_a_project_builds_against_the_build_tree(self):
        # `dlrun init` run from a build tree names BUILD/runtime (not a placeholder), and
        # find_package(dlrun) finds the runtime there.
        dlrun = os.path.join(BUILD_DIR, "cli", "dlrun")
        project = os.path.join(self.tmp, "fromtree")
        r = subprocess.run([dlrun, "init", project], capture_output=True, text=True, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        package = os.path.join(os.path.realpath(BUILD_DIR), "runtime")
        self.assertIn(f"-DCMAKE_PREFIX_PATH={package}\n", r.stdout)
        self.assertNotIn("DLRUN_PREFIX", r.stdout)
        r = subprocess.run(["cmake", "-S", project, "-B", os.path.join(project, "build"),
                            f"-DCMAKE_PREFIX_PATH={package}"], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])


class InitMessages(DlrunTestCase):
    def test_the_commands_it_prints_work_for_a_path_with_a_space(self):
        project = os.path.join(self.tmp, "my proj")
        r = subprocess.run([os.path.join(BUILD_DIR, "cli", "dlrun"), "init", project], capture_output=True, text=True,
                           env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"  cmake -S '{project}' -B '{project}/build' -DCMAKE_PREFIX_PATH=", r.stdout)
        self.assertIn(f"  dlrun local --nproc 2 '{project}/build/train'\n", r.stdout)


class PythonProject(DlrunTestCase):
    """dlrun init --python: a train.py on import dlrun that runs under dlrun local as it is."""

    def setUp(self):
        super().setUp()
        if not os.path.isdir(os.path.join(BUILD_DIR, "python", "dlrun")):
            self.skipTest("the dlrun Python module was not built (pybind11-dev, python3-dev)")
        self.env.pop("PYTHONPATH", None)

    def init_and_train(self, dlrun, python_path):
        project = os.path.join(self.tmp, "pyproject")
        r = subprocess.run([dlrun, "init", "--python", project], capture_output=True, text=True, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(project)), ["README.md", "job.toml", "train.py"])
        self.assertIn(f"PYTHONPATH={python_path} dlrun local --nproc 2 python3 {project}/train.py\n", r.stdout)
        # Debian's python3, whose torch the module is built against, whatever else PATH has first.
        env = dict(self.env, PYTHONPATH=python_path, PATH="/usr/bin:" + self.env.get("PATH", ""))
        r = subprocess.run([dlrun, "local", "--nproc", "2", "python3", os.path.join(project, "train.py")],
                           capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertRegex(r.stdout, r"\[0\] epoch 5: loss \d+\.\d{4}, batch \d+")
        self.assertNotIn("warning", r.stderr)
        self.assertNotIn("no training loss observed", r.stderr)  # it follows the documented loop
        # Its checkpoints went to the run directory.
        self.assertRegex(r.stderr, r"checkpoint of step \d+ saved to .*/checkpoints/step-")
        # The job file runs as it is: it carries the PYTHONPATH.
        with open(os.path.join(project, "job.toml")) as f:
            self.assertIn(f'PYTHONPATH = "{python_path}"', f.read())
        r = subprocess.run([dlrun, "submit", "--wait", os.path.join(project, "job.toml")], capture_output=True,
                           text=True, env=dict(self.env, PATH=env["PATH"]), timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        return project

    def test_from_the_build_tree(self):
        self.init_and_train(os.path.join(BUILD_DIR, "cli", "dlrun"), os.path.join(os.path.realpath(BUILD_DIR), "python"))

    def test_from_an_installed_prefix(self):
        prefix = os.path.join(self.tmp, "prefix")
        r = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", prefix], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        packages = [os.path.join(root) for root, dirs, _ in os.walk(prefix) if root.endswith("dist-packages")]
        self.assertEqual(len(packages), 1, packages)
        project = self.init_and_train(os.path.join(prefix, "bin", "dlrun"), packages[0])
        again = subprocess.run([os.path.join(prefix, "bin", "dlrun"), "init", "--python", project],
                               capture_output=True, text=True, env=self.env)
        self.assertEqual(again.returncode, 2)
        self.assertIn("train.py already exists; nothing was written (--force overwrites)", again.stderr)


if __name__ == "__main__":
    unittest.main()
