"""import dlrun: the runtime from Python, in real processes. examples/python_adaptive/train.py
runs the C++ example's tests (stop and resume at other world sizes, resize while training,
a signal to one rank), so every sample of every epoch is trained exactly once and the step
count is exact; with --adaptive, while AdaptiveBatch changes the batch and splits steps into
micro-batches. Errors reach Python as dlrun.Error subclasses with the runtime's messages."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import unittest

import test_elastic_training as elastic_tests
import test_runtime as runtime_tests
from harness import BUILD_DIR, DLRUN, SOURCE_DIR, DlrunTestCase, wait_for
from slurm_cluster import free_port

PYTHON = "/usr/bin/python3"  # Debian's, whose torch the module is built against
PACKAGE_DIR = os.path.join(BUILD_DIR, "python")
TRAIN = os.path.join(SOURCE_DIR, "examples", "python_adaptive", "train.py")


def module_built():
    return os.path.isdir(os.path.join(PACKAGE_DIR, "dlrun")) and any(
        name.startswith("_dlrun") for name in os.listdir(os.path.join(PACKAGE_DIR, "dlrun")))


class PythonExample:
    """Mixed into the C++ example's test classes: the same tests, the Python program."""
    example = [PYTHON, TRAIN]

    def setUp(self):
        super().setUp()
        if not module_built():
            self.skipTest("the dlrun Python module was not built (pybind11-dev, python3-dev)")
        self.env["PYTHONPATH"] = PACKAGE_DIR


class ElasticResume(PythonExample, runtime_tests.ElasticResume):
    pass


class RankSignals(PythonExample, runtime_tests.RankSignals):
    pass


class ResizeDuringTraining(PythonExample, elastic_tests.ResizeDuringTraining):
    pass


class AdaptiveResize(PythonExample, runtime_tests.ExampleCase):
    def test_resize_3_2_3_1_while_the_batch_adapts_trains_every_sample_once(self):
        # The MLP with decisions every 10 steps and at most 8 samples per rank per micro-step:
        # the batch grows from 24 and steps are split into micro-batches (accumulation).
        # 6 epochs of 1200 samples: at least 78 steps even at the largest batch (96), so every
        # hold below is reached however far and fast the batch grows.
        epochs = 6
        run_dir = os.path.join(self.tmp, "run")
        args = self.gated_args("--adaptive", "--model", "mlp", "--replan-every", "10", "--max-micro-batch", "8",
                               "--max-batch-size", "96")
        args[args.index("--epochs") + 1] = str(epochs)
        p = self.start("local", "--nproc", "1:3", "--run-dir", run_dir, "--", *args)
        held = 10
        self.hold_at(p, held)
        with open(os.path.join(run_dir, "job.json")) as f:
            job = json.load(f)["id"]
        for start, (size, next_hold) in enumerate(((2, 25), (3, 40), (1, 55)), start=2):
            r = self.dlrun("resize", str(job), str(size), timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.wait_starts(p, start), (size, held + 1))
            held = next_hold
            self.hold_at(p, held)
        self.allow(10 ** 6)
        code, out, err = self.finish(p, timeout=240)
        self.assertEqual(code, 0, out[-3000:] + err[-3000:])
        self.assertRegex(out.splitlines()[-1], r"^\[0\] test_accuracy=0\.\d{4}$")
        losses = self.losses()  # asserts that no step was trained twice
        self.assertEqual(sorted(losses), list(range(1, len(losses) + 1)), "a step is missing")
        seen = self.samples_per_epoch()
        self.assertEqual(sorted(seen), list(range(epochs)))
        for epoch, counter in seen.items():
            self.assertEqual(sorted(counter), list(range(runtime_tests.TRAIN_LIMIT)), f"epoch {epoch} missed samples")
            self.assertEqual(set(counter.values()), {1}, f"epoch {epoch} repeated samples")
        # AdaptiveBatch decided, and split steps into micro-batches of at most 8 per rank.
        grew = re.findall(r"adaptive batch: global (\d+) -> (\d+) \(micro-batch (\d+) x (\d+) step", out + err)
        self.assertTrue(grew, out + err)
        self.assertTrue(any(int(accum) > 1 for _, _, _, accum in grew), grew)
        self.assertTrue(all(int(micro) <= 8 for _, _, micro, _ in grew), grew)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            metrics = [json.loads(line) for line in f]
        self.assertEqual({m["replicas"] for m in metrics}, {1, 2, 3})
        # The adam rule (the square root of the batch scale) scaled the learning rate with the batch.
        self.assertTrue(any(m["global_batch"] > 24 and m["lr_factor"] > 1 for m in metrics), metrics)


VECTORS = os.path.join(SOURCE_DIR, "test", "vectors", "adaptive_batch.json")

# The C++ unit test's training loop (test/unit/runtime/adaptive_batch_test.cpp), in Python:
# prints one JSON line per case of the shared test vector.
VECTOR_RUN = """
import json, sys, torch, dlrun
torch.set_num_threads(1)
for case in json.load(open(sys.argv[1]))["cases"]:
    model = torch.nn.Linear(8, 1)
    with torch.no_grad():
        model.weight.fill_(case["initial_weight"])
        model.bias.fill_(0)
    model = dlrun.DataParallel(model)
    make = torch.optim.Adam if case["optimizer"] == "adam" else torch.optim.SGD
    extra = {"momentum": case["momentum"]} if "momentum" in case else {}
    optimizer = make(model.parameters(), lr=case["lr"], **extra)
    seconds = [0.0]
    loader = dlrun.AdaptiveDataLoader(torch.arange(1 << 20), case["initial_batch"], model=model, optimizer=optimizer,
                                      max_batch_size=case["max_batch"], replan_every=case["replan_every"],
                                      measure_every=case["measure_every"], scaling_rule=case.get("rule", "auto"),
                                      log_every=0, seed=1,
                                      clock=lambda: seconds[0])
    batches = []
    for indices in loader:
        step = loader.step - 1
        n = len(indices)
        seconds[0] += 1e-5 * n
        g = torch.Generator().manual_seed(7000 + step * 131 + (int(indices[0]) if n else 0))
        x = torch.randn(n, 8, generator=g)
        y = x.sum(1, keepdim=True) * 0.5 + 3.0 * torch.randn(n, 1, generator=g)
        loss = (model(x) - y).pow(2).sum() * loader.loss_scale()
        loss.backward()
        loader.observe_loss(loss)
        if not loader.accumulating:
            seconds[0] += 0.004
        optimizer.step()
        optimizer.zero_grad()
        if loader.accumulating:
            continue
        if batches and batches[-1][0] == loader.batch.global_size:
            batches[-1][1] += 1
        else:
            batches.append([loader.batch.global_size, 1])
        if step + 1 == case["steps"]:
            break
    s = loader.stats()
    print(json.dumps({"name": case["name"], "batches": batches, "noise_scale": s["noise_scale"],
                      "lr_factor": s["lr_factor"], "progress": loader.progress(),
                      "noise_floor": s["noise_floor"]}))
"""


class SharedVector(DlrunTestCase):
    """test/vectors/adaptive_batch.json: the Python module decides what the C++ runtime
    decides (its unit test checks the same file) for the same data and step times."""

    def test_the_same_batch_sizes_learning_rates_and_noise_scale_as_the_cpp_runtime(self):
        if not module_built():
            self.skipTest("the dlrun Python module was not built (pybind11-dev, python3-dev)")
        env = dict(self.env, PYTHONPATH=PACKAGE_DIR)
        r = subprocess.run([PYTHON, "-c", VECTOR_RUN, VECTORS], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        got = {line["name"]: line for line in map(json.loads, r.stdout.splitlines())}
        with open(VECTORS) as f:
            cases = json.load(f)["cases"]
        self.assertEqual(sorted(got), sorted(c["name"] for c in cases))
        for case in cases:
            expected, run = case["expected"], got[case["name"]]
            with self.subTest(case["name"]):
                self.assertGreater(len(expected["batches"]), 1, "the vector should change the batch")
                self.assertEqual(run["batches"], expected["batches"])
                for key in ("noise_scale", "lr_factor", "progress", "noise_floor"):
                    self.assertAlmostEqual(run[key], expected[key], delta=1e-3 * abs(expected[key]), msg=key)


class Errors(DlrunTestCase):
    """What a script sees when something is wrong: a dlrun.Error subclass with the runtime's
    message, never a crashed interpreter."""

    def setUp(self):
        super().setUp()
        if not module_built():
            self.skipTest("the dlrun Python module was not built (pybind11-dev, python3-dev)")
        self.env["PYTHONPATH"] = PACKAGE_DIR
        for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "DLRUN_RUN_DIR"):
            self.env.pop(name, None)

    def python(self, code, env=None):
        result = subprocess.run([PYTHON, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                                env=env or self.env, timeout=120, cwd=self.tmp)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return result.stdout

    def test_bad_options_are_config_errors(self):
        out = self.python("""
            import torch, dlrun
            for options in ({"rendezvous_timeout": 0}, {"backend": "mpi"}, {"device": "tpu"}):
                try:
                    dlrun.init(**options)
                except dlrun.ConfigError as e:
                    print(type(e).__name__, "|", e)
            ds = torch.utils.data.TensorDataset(torch.zeros(10, 3), torch.zeros(10, dtype=torch.long))
            model = dlrun.DataParallel(torch.nn.Linear(3, 2))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for make in (lambda: dlrun.ElasticDataLoader(ds, 0),
                         lambda: dlrun.AdaptiveDataLoader(ds, 64, model=model, optimizer=opt, max_batch_size=8),
                         lambda: dlrun.AdaptiveDataLoader(ds, 8, model=model, optimizer=opt, scaling_rule="fast"),
                         lambda: dlrun.Checkpoint([object()]),
                         lambda: dlrun.AdaptiveDataLoader(ds, 8, model=model, optimizer=model.parameters()),
                         lambda: dlrun.Checkpoint(model)):
                try:
                    make()
                    print("no error")
                except dlrun.ConfigError as e:
                    print(type(e).__name__, "|", e)
            """)
        lines = out.splitlines()
        self.assertEqual(len(lines), 9, out)
        self.assertEqual(lines[0], "ConfigError | rendezvous_timeout must be a positive number, not 0 (int)")
        self.assertEqual(lines[1], 'ConfigError | backend must be one of "auto", "gloo", "nccl", not "mpi"')
        self.assertEqual(lines[2], 'ConfigError | device must be one of "auto", "cpu", "cuda", not "tpu"')
        self.assertEqual(lines[3], "ConfigError | batch_size must be at least 1, not 0 (int)")
        self.assertEqual(lines[4], "ConfigError | max_batch_size (8) is below batch_size (64), the initial batch: the "
                                   "batch can only grow from it")
        self.assertIn("scaling_rule must be auto, adascale", lines[5])
        self.assertIn("Checkpoint cannot track a object", lines[6])
        self.assertEqual(lines[7], "ConfigError | AdaptiveDataLoader needs optimizer= a torch.optim optimizer, "
                                   "not a generator")
        self.assertIn("Checkpoint takes a list of what to track", lines[8])

    def test_an_optimizer_step_without_a_batch_from_its_adaptive_loader_is_refused(self):
        # AdaptiveBatch timed and sized steps that another loop trained: the batch grew for a
        # loader that yielded nothing, and every rank trained the whole dataset.
        out = self.python("""
            import torch, dlrun
            ds = torch.utils.data.TensorDataset(torch.zeros(64, 3), torch.zeros(64, dtype=torch.long))
            model = dlrun.DataParallel(torch.nn.Linear(3, 2))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = dlrun.AdaptiveDataLoader(ds, 8, model=model, optimizer=opt)
            for x, y in torch.utils.data.DataLoader(ds, 8):
                torch.nn.functional.cross_entropy(model(x), y).backward()
                try:
                    opt.step()
                except dlrun.ConfigError as e:
                    print("ConfigError |", e)
                break
            for x, y in loader:  # the loader's own steps go on as before
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                opt.zero_grad()
            print("steps", loader.step)
            """)
        self.assertEqual(out.splitlines(), [
            "ConfigError | optimizer.step() came with no batch from its AdaptiveDataLoader since the last step: step "
            "once for each batch the loader yields (for x, y in loader: ... optimizer.step()); the loader sizes the "
            "batches it yields, not another loader's",
            "steps 8"])

    def test_a_second_init_that_asks_for_another_world_is_refused(self):
        # It returned the first Context whatever it asked for: a script (or a library) that
        # asked for Gloo, or a longer timeout, ran with what the first call had made.
        out = self.python("""
            import dlrun
            first = dlrun.init(collective_timeout=120)
            print(dlrun.init() is first, dlrun.init(collective_timeout=120.0) is first)
            for options in ({"collective_timeout": 30}, {"backend": "nccl", "handle_signals": False}):
                try:
                    dlrun.init(**options)
                except dlrun.ConfigError as e:
                    print("ConfigError |", e)
            """)
        lines = out.splitlines()
        self.assertEqual(lines[0], "True True")
        self.assertEqual(lines[1], "ConfigError | dlrun.init() was called before, and a second call cannot change "
                                   "the world it made: collective_timeout=30.0 (the first call's: 120.0). Pass these "
                                   "to the first call; dlrun.init() with no arguments returns the Context it made")
        self.assertIn("backend='nccl' (the first call's: 'auto'), handle_signals=False (the first call's: True)",
                      lines[2])

    def test_arguments_of_the_wrong_type_are_config_errors_that_name_them(self):
        out = self.python("""
            import pathlib, numpy, torch, dlrun
            for options in ({"rendezvous_timeout": "60"}, {"collective_timeout": float("inf")},
                            {"handle_signals": "no"}, {"backend": None}, {"rendezvous_timeout": 1e10},
                            {"collective_timeout": 1e-4}):
                try:
                    dlrun.init(**options)
                except dlrun.ConfigError as e:
                    print("ConfigError |", e)
            ds = torch.utils.data.TensorDataset(torch.zeros(10, 3), torch.zeros(10, dtype=torch.long))
            model = dlrun.DataParallel(torch.nn.Linear(3, 2))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            def adaptive(**options):
                return dlrun.AdaptiveDataLoader(ds, 8, model=model, optimizer=opt, **options)
            for make in (lambda: dlrun.ElasticDataLoader(ds, "64"),
                         lambda: dlrun.ElasticDataLoader(ds, 6.5),
                         lambda: dlrun.ElasticDataLoader(ds, True),
                         lambda: dlrun.ElasticDataLoader(ds, 4, seed=-1),
                         lambda: dlrun.ElasticDataLoader(ds, 4, collate_fn="stack"),
                         lambda: dlrun.ElasticDataLoader(iter(range(10)), 4),
                         lambda: adaptive(noise_floor="false"),
                         lambda: adaptive(max_batch_size=None),
                         lambda: adaptive(min_improvement=float("nan")),
                         lambda: adaptive(measure_every=0),
                         lambda: adaptive(clock=3.0),
                         lambda: dlrun.DataParallel(torch.nn.Linear(3, 2).parameters()),
                         lambda: dlrun.DataParallel(torch.nn.Linear(3, 2), bucket_cap_mb="25"),
                         lambda: dlrun.Checkpoint([model], keep_last=0),
                         lambda: dlrun.Checkpoint([model], directory=3),
                         lambda: dlrun.ElasticDataLoader(ds, 2**70),
                         lambda: dlrun.ElasticDataLoader(ds, 1e300)):
                try:
                    make()
                    print("no error")
                except dlrun.ConfigError as e:
                    print("ConfigError |", e)
            # What stands for a whole number, a number or a flag in Python is taken as one.
            print("batch", *(dlrun.ElasticDataLoader(ds, b).batch_size for b in
                              (4.0, numpy.int64(4), numpy.float32(4), torch.tensor(4), torch.tensor(4.0))))
            loader = adaptive(noise_floor=0, accumulation=numpy.bool_(True), max_batch_size=64.0,
                              min_improvement=numpy.float32(0.1))
            loader.set_base_lr(torch.tensor(0.05))
            loader.set_base_lr(0)  # a schedule's warm-up starts there
            print("epochs", next(loader.epochs(float("inf"))))
            ckpt = dlrun.Checkpoint([model, opt, loader], directory=pathlib.Path("ckpt"))
            # A diverged loss is saved as it is, a flag as 0 or 1.
            saved = ckpt.save(loss=torch.tensor(0.5), diverged=float("nan"), ppl=float("inf"), done=True)
            print("saved", saved.name, sorted(ckpt.restore().values.items()))
            for bad in (lambda: ckpt.save(step="3"), lambda: next(loader.epochs("3"))):
                try:
                    bad()
                except dlrun.ConfigError as e:
                    print("ConfigError |", e)
            """)
        errors = [line.split(" | ", 1)[1] for line in out.splitlines() if line.startswith("ConfigError | ")]
        self.assertEqual(errors, [
            "rendezvous_timeout must be a positive number, not '60' (str)",
            "collective_timeout must be a finite number, not inf (float)",
            "handle_signals must be True or False, not 'no' (str)",
            "backend must be a string, not None (NoneType)",
            # 1e10 s failed at once (Gloo's clock overflowed), 1e-4 s was 0 ms.
            "rendezvous_timeout must be from 0.001 to 2592000 seconds (30 days), not 1e+10",
            "collective_timeout must be from 0.001 to 2592000 seconds (30 days), not 0.0001",
            "batch_size must be a whole number, at least 1, not '64' (str)",
            "batch_size must be a whole number, at least 1, not 6.5 (float)",
            "batch_size must be a whole number, at least 1, not True (bool)",
            "seed must be at least 0, not -1 (int)",
            "collate_fn must be a function (or None), not 'stack' (str)",
            "the dataset must have __len__ and __getitem__ (a map-style torch Dataset or a tensor), not a "
            "range_iterator: a loader that resumes at a sample index needs to index its samples",
            "noise_floor must be True or False, not 'false' (str)",
            "max_batch_size must be a whole number, at least 1, not None (NoneType)",
            "min_improvement must be a number, not nan (float)",
            "measure_every must be at least 1, not 0 (int)",
            "clock must be a function (or None), not 3.0 (float)",
            "DataParallel wraps a torch.nn.Module, not a generator",
            "bucket_cap_mb must be a positive number, not '25' (str)",
            "keep_last must be at least 1, not 0 (int)",
            "directory must be a path (a string or a pathlib.Path), not 3 (int)",
            "batch_size must be at most 9223372036854775807, not 1180591620717411303424 (int)",
            "batch_size must be at most 9223372036854775807, not 1e+300 (float)",
            "step must be a whole number, at least 0, not '3' (str)",
            "count must be a whole number, at least 0, not '3' (str)",
        ], out)
        self.assertNotIn("no error", out)
        self.assertIn("batch 4 4 4 4 4", out)
        self.assertIn("epochs 0", out)
        self.assertIn("saved step-000000000000 [('diverged', nan), ('done', 1.0), ('loss', 0.5), ('ppl', inf)]", out)

    def test_sparse_gradients_across_ranks_are_refused_by_name(self):
        # They failed in the first backward with torch's "Expected torch.FloatTensor, got
        # torch.sparse.FloatTensor"; in a world of one they work and are taken.
        code = textwrap.dedent("""
            import torch, dlrun
            ctx = dlrun.init()
            net = torch.nn.Sequential(torch.nn.Embedding(10, 4, sparse=True), torch.nn.Linear(4, 1))
            try:
                dlrun.DataParallel(net)
                print("taken")
            except dlrun.ConfigError as e:
                print("ConfigError |", e)
            """)
        r = self.dlrun("local", "--nproc", "2", "-q", PYTHON, "-c", code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[0] ConfigError | 0: sparse gradients (sparse=True) are not reduced across ranks: "
                      "make it with sparse=False", r.stdout)
        self.assertEqual(self.python(code), "taken\n")

    def test_a_step_after_only_no_sync_backwards_is_named_at_the_next_forward(self):
        # Each rank applied its own gradient and the replicas drifted apart without a word.
        code = textwrap.dedent("""
            import torch, dlrun
            ctx = dlrun.init()
            torch.manual_seed(ctx.rank)
            model = dlrun.DataParallel(torch.nn.Linear(3, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            x = torch.randn(4, 3)
            with model.no_sync():                # accumulate, then a synced backward: fine
                model(x).sum().backward()
            model(x).sum().backward()
            opt.step(); opt.zero_grad()
            with model.no_sync():                # the step's last backward inside no_sync
                model(x).sum().backward()
            opt.step(); opt.zero_grad()
            try:
                model(x)
                print("no error")
            except dlrun.ConfigError as e:
                print("ConfigError |", e)
            class Clamped(torch.nn.Linear):      # changes its weight in place in every forward
                def forward(self, x):
                    with torch.no_grad():
                        self.weight.clamp_(-0.5, 0.5)
                    return super().forward(x)
            clamped = dlrun.DataParallel(Clamped(3, 1))
            opt = torch.optim.SGD(clamped.parameters(), lr=0.1)
            for step in range(2):                # accumulation done right: no error
                for micro in range(3):
                    with clamped.no_sync():
                        clamped(x).sum().backward()
                clamped(x).sum().backward()
                opt.step(); opt.zero_grad()
            print("clamped ok")
            """)
        r = self.dlrun("local", "--nproc", "2", "-q", PYTHON, "-c", code)
        self.assertEqual(r.returncode, 0, r.stderr)
        for rank in (0, 1):
            self.assertIn(f"[{rank}] ConfigError | DataParallel: the optimizer stepped after a backward inside "
                          "no_sync() and before any backward outside it", r.stdout)
            self.assertIn(f"[{rank}] clamped ok", r.stdout)
        self.assertIn("no error", self.python(code))  # a world of one has nothing to average

    def test_a_model_checkpoint_of_another_shape_changes_nothing(self):
        # torch's load_state_dict copied the tensors that fit before it refused the others.
        out = self.python("""
            import torch, dlrun
            saved = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
            dlrun.Checkpoint([saved], directory="ck").save(step=1)
            model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 5))
            before = model[0].weight.clone()
            try:
                dlrun.Checkpoint([model], directory="ck").restore()
            except dlrun.CheckpointError as e:
                print("CheckpointError |", e)
            print("unchanged", torch.equal(model[0].weight, before))
            """)
        self.assertIn("does not fit this one: '1.weight' is 2x3 there, 5x3 here; '1.bias' is 2 there, 5 here", out)
        self.assertIn("nothing was restored from it", out)
        self.assertIn("unchanged True", out)
        # Whatever is tracked before the model is not restored either: every object is asked first.
        out = self.python("""
            import torch, dlrun
            saved = torch.nn.Linear(4, 2)
            opt = torch.optim.Adam(saved.parameters())
            saved(torch.ones(1, 4)).sum().backward(); opt.step()
            dlrun.Checkpoint([opt, saved], directory="ck2").save(step=1)
            model = torch.nn.Linear(4, 5)
            fresh = torch.optim.Adam(model.parameters())
            try:
                dlrun.Checkpoint([fresh, model], directory="ck2").restore()
            except dlrun.CheckpointError as e:
                print("CheckpointError |", e)
            print("optimizer state", len(fresh.state_dict()["state"]))
            lazy = torch.nn.LazyLinear(3)        # takes the checkpoint's shape, as load_state_dict does
            lazy(torch.ones(1, 4))
            dlrun.Checkpoint([lazy], directory="ck3").save(step=1)
            again = torch.nn.LazyLinear(3)
            print("lazy", dlrun.Checkpoint([again], directory="ck3").restore().step, tuple(again.weight.shape))
            """)
        self.assertIn("nothing was restored from it", out)
        self.assertIn("optimizer state 0", out)
        self.assertIn("lazy 1 (3, 4)", out)

    def test_star_import_keeps_pythons_environment_error(self):
        out = self.python("""
            from dlrun import *
            import dlrun
            try:
                open("/nonexistent/file")
            except EnvironmentError:
                print("caught", issubclass(dlrun.EnvironmentError, dlrun.Error))
            """)
        self.assertEqual(out, "caught True\n")

    def test_a_stop_without_a_checkpoint_saved_since_is_said(self):
        # The restart went back to the last checkpoint and trained its steps again, in silence
        # (an AdaptDL script's checkpoint was automatic).
        script = os.path.join(self.tmp, "stop.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent("""
                import sys, torch, dlrun
                ctx = dlrun.init()
                model = dlrun.DataParallel(torch.nn.Linear(2, 1))
                ckpt = dlrun.Checkpoint([model])
                ckpt.save(step=1)
                ctx.request_stop()
                assert ctx.poll_stop()
                if sys.argv[1] == "save":
                    ckpt.save(step=2)
                code = ctx.exit_code()
                print("exit", code, ctx.exit_code())
                """))
        warning = "with no checkpoint saved since the stop was agreed"
        for how, said in (("nosave", 1), ("save", 0)):
            r = subprocess.run([DLRUN, "local", "--nproc", "1", "--run-dir", os.path.join(self.tmp, how), PYTHON, script,
                                how], capture_output=True, text=True, env=self.env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("exit 75 75", r.stdout)
            self.assertEqual(r.stderr.count(warning), said, r.stderr)

    def test_a_second_ctrl_c_ends_a_script_run_on_its_own(self):
        # After dlrun.init() Ctrl-C asks the loop to stop; a script that does not ask (or takes
        # long to) ends at the second, as dlrun local's second Ctrl-C does (it took a third).
        marker = os.path.join(self.tmp, "asked")
        p = subprocess.Popen([PYTHON, "-c", textwrap.dedent(f"""
            import time, dlrun
            ctx = dlrun.init()
            open({marker + ".ready"!r}, "w").close()
            while True:
                if ctx.poll_stop():  # a loop without DataParallel steps
                    open({marker!r}, "w").close()
                time.sleep(0.02)
            """)], env=self.env, cwd=self.tmp, start_new_session=True)
        self._started = getattr(self, "_started", []) + [p]
        self.assertTrue(wait_for(lambda: os.path.exists(marker + ".ready"), 60))
        p.send_signal(signal.SIGINT)
        self.assertTrue(wait_for(lambda: os.path.exists(marker), 60))
        self.assertIsNone(p.poll())  # the first one asks, and the script goes on
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=60), -signal.SIGINT)

    def test_micro_batches_train_the_whole_steps_gradient_whatever_the_loops_order(self):
        # zero_grad() at the top of the loop (PyTorch's tutorials, AdaptDL's examples), at its
        # end, or the model's: the step's gradient is that of all its samples. At the top, the
        # last micro-batch's zero_grad wiped the others' (the step trained on 2 of 16 samples).
        out = self.python("""
            import torch, dlrun
            torch.manual_seed(0)
            ds = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            net = torch.nn.Linear(4, 1)
            for order in ("zero_first", "zero_last", "model_zero_first", "model_zero_last"):
                model = dlrun.DataParallel(torch.nn.Linear(4, 1))
                model.module.load_state_dict(net.state_dict())
                seen = []
                class Recording(torch.optim.SGD):
                    def step(self, closure=None):
                        seen.append(model.module.weight.grad.clone())
                        return super().step(closure)
                opt = Recording(model.parameters(), lr=0.0)
                loader = dlrun.AdaptiveDataLoader(ds, 16, model=model, optimizer=opt, max_batch_size=16,
                                                  max_micro_batch=2, scaling_rule="none")
                zero = model.zero_grad if order.startswith("model") else opt.zero_grad
                xs, ys = [], []
                for x, y in loader:
                    if order.endswith("first"):
                        zero()
                    torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
                    xs.append(x)
                    ys.append(y)
                    opt.step()
                    if order.endswith("last"):
                        zero()
                    if len(seen) == 1:
                        break
                net.zero_grad()
                torch.nn.functional.mse_loss(net(torch.cat(xs)), torch.cat(ys), reduction="sum").backward()
                print(order, len(xs), float((seen[0] - net.weight.grad).abs().max()) < 1e-4)
            """)
        for order in ("zero_first", "zero_last", "model_zero_first", "model_zero_last"):
            self.assertIn(f"{order} 8 True", out)

    def test_what_a_pytorch_user_does_works_or_is_refused_plainly(self):
        out = self.python("""
            import gc, torch, dlrun
            ds = torch.utils.data.TensorDataset(torch.randn(64, 3), torch.randn(64, 1))
            model = dlrun.DataParallel(torch.nn.Linear(3, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = dlrun.AdaptiveDataLoader(ds, 16, model=model, optimizer=opt, max_micro_batch=4)
            # An LR scheduler made after the loader wraps the loader's optimizer.step.
            sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
                opt.step()
                opt.zero_grad()
                if not loader.accumulating:
                    sched.step()
            print("steps", loader.step)
            # Leaving the loop inside a step's micro-batches: the optimizer is itself again.
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
                print("accumulating", loader.accumulating)
                break
            opt.zero_grad()
            print("zeroed", all(p.grad is None or not p.grad.any() for p in model.parameters()))
            with model.no_sync():
                with model.no_sync():
                    pass
                print("still no sync", not model._sync)
            print("sync again", model._sync)
            other = dlrun.ElasticDataLoader(ds, 8)
            try:
                dlrun.Checkpoint([model, opt, loader, other])
            except dlrun.ConfigError as e:
                print("ConfigError |", e)
            del loader
            gc.collect()
            try:
                opt.step()
            except dlrun.ConfigError as e:
                print("ConfigError |", e)
            """)
        self.assertIn("steps 4", out)
        self.assertIn("accumulating True", out)
        self.assertIn("zeroed True", out)
        self.assertIn("still no sync True", out)
        self.assertIn("sync again True", out)
        self.assertIn("ConfigError | a Checkpoint tracks one data loader", out)
        self.assertIn("ConfigError | the AdaptiveDataLoader of this optimizer is gone", out)

    def test_closures_loss_values_and_an_earlier_lr_scheduler_work_as_with_torch(self):
        # optimizer.step(closure) dropped the closure (the step trained on no gradient), a loss
        # given as a number was a TypeError listing C++ signatures, and an LR scheduler made
        # before the loader warned that its step() came before the optimizer's.
        out = self.python("""
            import warnings, torch, dlrun
            torch.manual_seed(0)
            ds = torch.utils.data.TensorDataset(torch.randn(64, 3), torch.randn(64, 1))
            model = dlrun.DataParallel(torch.nn.Linear(3, 1))
            before = model.module.weight.detach().clone()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
            loader = dlrun.AdaptiveDataLoader(ds, 16, model=model, optimizer=opt, max_micro_batch=4)
            losses = []
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for x, y in loader:
                    def closure():
                        opt.zero_grad()
                        loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum")
                        loss.backward()
                        return loss
                    loss = opt.step(closure)
                    losses.append(loss)
                    loader.observe_loss(float(loss))
                    if not loader.accumulating:
                        sched.step()
            print("steps", loader.step, "losses", len(losses), all(isinstance(l, torch.Tensor) for l in losses))
            print("trained", not torch.equal(before, model.module.weight.detach()))
            print("warnings", [str(w.message)[:60] for w in caught])
            for bad in (lambda: loader.observe_loss(torch.zeros(3)), lambda: loader.observe_loss("0.5")):
                try:
                    bad()
                except dlrun.ConfigError as e:
                    print("ConfigError |", e)
            lbfgs = torch.optim.LBFGS(dlrun.DataParallel(torch.nn.Linear(3, 1)).parameters())
            try:
                dlrun.AdaptiveDataLoader(ds, 16, model=model, optimizer=lbfgs)
            except dlrun.ConfigError as e:
                print("ConfigError |", e)
            """)
        # 4 micro-batches a step (a world of one measures on the first two against the last two).
        self.assertIn("steps 4 losses 16 True", out)
        self.assertIn("trained True", out)
        self.assertIn("warnings []", out)
        self.assertIn("ConfigError | observe_loss takes the micro-batch's loss, one number, not a tensor of shape (3,)",
                      out)
        self.assertIn("ConfigError | loss must be a number, not '0.5' (str)", out)
        self.assertIn("ConfigError | AdaptiveDataLoader cannot drive LBFGS", out)

    def test_a_torch_lr_scheduler_sets_the_base_rates_of_every_group(self):
        # A scheduler made before the loader set the rates the loader then kept as its base for
        # the whole run (OneCycleLR's first rate, 25x below its peak), and set_base_lr gave every
        # group one rate. Between steps the groups now hold the base rates, which a scheduler
        # reads and writes; each step trains at them times the rule's factor.
        out = self.python("""
            import torch, dlrun
            torch.manual_seed(0)
            ds = torch.utils.data.TensorDataset(torch.randn(256, 3), torch.randn(256, 1))
            seen = []
            class Recording(torch.optim.SGD):
                def step(self, closure=None):
                    seen.append(tuple(round(g["lr"], 9) for g in self.param_groups))
                    return super().step(closure)
            def run(when):
                seen.clear()
                net = torch.nn.Linear(3, 1)
                opt = Recording([{"params": [net.weight], "lr": 0.1}, {"params": [net.bias], "lr": 0.01}])
                schedule = lambda: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[0.1, 0.01], total_steps=40)
                if when == "before":
                    sched = schedule()
                if when != "plain":
                    model = dlrun.DataParallel(net)
                    loader = dlrun.AdaptiveDataLoader(ds, 16, model=model, optimizer=opt, max_batch_size=16,
                                                      scaling_rule="none")
                else:
                    model, loader = net, torch.utils.data.DataLoader(ds, 16)
                if when != "before":
                    sched = schedule()
                for x, y in loader:
                    torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
                    opt.step()
                    opt.zero_grad()
                    if not getattr(loader, "accumulating", False):
                        sched.step()
                return list(seen)
            plain = run("plain")
            print("steps", len(plain), "peak", max(lr for lr, _ in plain))
            print("before", run("before") == plain)
            print("after", run("after") == plain)
            net = torch.nn.Linear(3, 1)
            opt = Recording([{"params": [net.weight], "lr": 0.1}, {"params": [net.bias], "lr": 0.01}])
            loader = dlrun.AdaptiveDataLoader(ds, 16, model=dlrun.DataParallel(net), optimizer=opt)
            loader.set_base_lr(0.05)
            print("set_base_lr", [g["lr"] for g in opt.param_groups], loader.adaptive.base_lrs())
            """)
        self.assertIn("steps 16 peak 0.1", out)  # past its peak (step 12 of 40)
        self.assertIn("before True", out)
        self.assertIn("after True", out)
        self.assertIn("set_base_lr [0.05, 0.05] [0.05, 0.05]", out)

    def test_a_restored_loader_puts_its_base_rates_into_the_optimizer(self):
        # Checkpoints of the version that kept the scaled rate in the groups held it in the
        # optimizer's state: restored as it was, the next step would scale it again.
        out = self.python("""
            import torch, dlrun
            ds = torch.utils.data.TensorDataset(torch.randn(64, 3), torch.randn(64, 1))
            def make():
                net = torch.nn.Linear(3, 1)
                opt = torch.optim.SGD(net.parameters(), lr=0.1)
                loader = dlrun.AdaptiveDataLoader(ds, 16, model=dlrun.DataParallel(net), optimizer=opt)
                return opt, loader, dlrun.Checkpoint([net, opt, loader], directory="ck")
            opt, loader, ckpt = make()
            for x, y in loader:
                torch.nn.functional.mse_loss(loader.model(x), y, reduction="sum").backward()
                opt.step()
                opt.zero_grad()
            opt.param_groups[0]["lr"] = 0.3  # as the older version left a scaled rate there
            ckpt.save()
            opt, loader, ckpt = make()
            ckpt.restore()
            print("restored", opt.param_groups[0]["lr"], loader.adaptive.base_lrs())
            """)
        self.assertIn("restored 0.1 [0.1]", out)

    def test_a_step_left_before_its_optimizer_step_goes_back_to_the_sampler(self):
        # Leaving the loop on a step's first micro-batch counted the step and its samples as
        # done: a checkpoint then skipped them, and their gradient stayed in .grad for the next.
        out = self.python("""
            import torch, dlrun
            ds = torch.utils.data.TensorDataset(torch.arange(64.).reshape(64, 1), torch.zeros(64, 1))
            model = dlrun.DataParallel(torch.nn.Linear(1, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            loader = dlrun.AdaptiveDataLoader(ds, 8, model=model, optimizer=opt, max_batch_size=8,
                                              max_micro_batch=4)
            trained = []
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
                opt.step()
                opt.zero_grad()
                if loader.step == 3 and loader.accumulating:
                    left = x.flatten().tolist()
                    break
                trained.append(x.flatten().tolist())
            print("after the break", loader.step, loader.sampler.position,
                  all(p.grad is None or not p.grad.any() for p in model.parameters()))
            for x, y in loader:
                print("next", x.flatten().tolist() == left, loader.step)
                break
            """)
        self.assertIn("after the break 2 16 True", out)
        self.assertIn("next True 3", out)

    def test_a_rank_without_a_sample_gets_an_empty_batch_of_any_collated_kind(self):
        # A rank with no sample of an epoch's short last step got sample 0's data in a UserDict
        # (Hugging Face's BatchEncoding is one), a TypeError for namedtuples, and strings kept.
        out = self.python("""
            import collections, torch, dlrun
            from torch.utils.data import default_collate
            from dlrun.loader import _take_none
            Sample = collections.namedtuple("Sample", "x y")
            class Encoding(collections.UserDict):
                pass
            for sample in (Sample(torch.ones(3), 1), Encoding(ids=torch.ones(2, dtype=torch.long), name="s0"),
                           {"x": torch.ones(3), "name": "s0"}, (torch.ones(3), "s0")):
                empty = _take_none(default_collate([sample]))
                values = list(empty.values()) if hasattr(empty, "values") else list(empty)
                print(type(empty).__name__, [len(v) for v in values])
            try:
                _take_none(object())
            except dlrun.ConfigError as e:
                print("ConfigError |", e)
            """)
        self.assertIn("Sample [0, 0]", out)
        self.assertIn("Encoding [0, 0]", out)
        self.assertIn("dict [0, 0]", out)
        self.assertIn("list [0, 0]", out)
        self.assertIn("ConfigError | this rank has no sample in this step", out)

    def test_what_torch_distributed_users_pass_to_the_context_works_or_is_named(self):
        # all_reduce_sum(tensor) and broadcast(1.5) were pybind TypeErrors listing C++ signatures,
        # context="x" an AttributeError, a checkpoint_state() of an int "Unable to cast".
        out = self.python("""
            import torch, dlrun
            ctx = dlrun.init()
            print("sums", ctx.all_reduce_sum(torch.tensor([[1, 2]])), ctx.all_reduce_sum(3), ctx.all_reduce_sum((1, 2.5)))
            print("broadcast", ctx.broadcast(7))
            class State:
                def checkpoint_state(self):
                    return 3
                def restore_checkpoint_state(self, data):
                    pass
            for bad in (lambda: ctx.broadcast(1.5), lambda: ctx.all_reduce_sum(["a"]),
                        lambda: dlrun.DataParallel(torch.nn.Linear(1, 1), context="x"),
                        lambda: dlrun.Checkpoint([State()], directory="ck").save(step=1)):
                try:
                    bad()
                except dlrun.Error as e:
                    print(type(e).__name__, "|", str(e).splitlines()[0])
            """)
        self.assertIn("sums tensor([[1, 2]]) 3.0 [1.0, 2.5]", out)
        self.assertIn("broadcast 7", out)
        self.assertIn("ConfigError | value must be a whole number, not 1.5 (float)", out)
        self.assertIn("ConfigError | values[0] must be a number, not 'a' (str)", out)
        self.assertIn("ConfigError | context must be a dlrun.Context (what dlrun.init() returns), not 'x' (str)", out)
        self.assertIn("State.checkpoint_state() must return bytes, not 3 (int)", out)

    def test_a_peer_that_has_gone_is_named(self):
        # A collective after a peer exited is a CommunicationError; in the middle of backward()
        # torch's autograd turns every error into a RuntimeError, which keeps the runtime's
        # message (docs/python.md, "Errors").
        code = textwrap.dedent("""
            import os, time, torch, dlrun
            ctx = dlrun.init()
            model = dlrun.DataParallel(torch.nn.Linear(100, 10))
            if ctx.rank == 1:
                os._exit(0)
            try:
                model(torch.randn(8, 100)).sum().backward()
            except RuntimeError as e:
                print("backward:", type(e).__name__, "|", e)
            seen = set()
            for call in [ctx.barrier, lambda: ctx.all_reduce_sum([1.0])] * 5:
                try:
                    call()
                except Exception as e:
                    seen.add(f"{type(e).__name__} {isinstance(e, dlrun.CommunicationError)}")
            print("seen", sorted(seen))
            """)
        r = self.dlrun("local", "--nproc", "2", "-q", PYTHON, "-c", code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\[0\] backward: RuntimeError \| rank 0: rank 1 \(pid \d+\) exited in the middle of "
                                   r"a gradient allreduce")
        self.assertIn("[0] seen ['CommunicationError True']", r.stdout)

    def test_a_half_set_environment_and_an_unreachable_store(self):
        env = dict(self.env, RANK="0", WORLD_SIZE="2")
        out = self.python("""
            import dlrun
            try:
                dlrun.init()
            except dlrun.EnvironmentError as e:
                print("EnvironmentError |", e)
            """, env)
        self.assertIn("EnvironmentError | RANK and WORLD_SIZE are set but MASTER_ADDR and MASTER_PORT are not", out)
        # Rank 1 of 2 whose rank 0 never comes: the store's port is closed.
        env = dict(self.env, RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        out = self.python("""
            import dlrun
            try:
                dlrun.init(rendezvous_timeout=2)
            except dlrun.RendezvousTimeout as e:
                print("RendezvousTimeout |", e)
            print("the interpreter lives on")
            """, env)
        self.assertRegex(out, r"RendezvousTimeout \| .*127\.0\.0\.1:\d+")
        # Said once nothing listened for the whole timeout (the store then waited a second one).
        self.assertIn("within 2 s: check that rank 0 is running and MASTER_ADDR/MASTER_PORT are right (nothing "
                      "listens there)", out)
        self.assertIn("the interpreter lives on", out)

    def test_under_torchrun_the_ranks_use_its_agents_store(self):
        # torchrun's agent hosts the store at MASTER_PORT for every rank (and keeps it across
        # restarts): rank 0 could not host its own there ("is the port in use?"). Here a store
        # stands in for the agent's, and each attempt's keys stay apart.
        port = free_port()
        agent = subprocess.Popen([PYTHON, "-c", textwrap.dedent(f"""
            import time, datetime, torch.distributed as dist
            store = dist.TCPStore("127.0.0.1", {port}, is_master=True, timeout=datetime.timedelta(seconds=60))
            time.sleep(120)
            """)], env=self.env)
        self.addCleanup(agent.wait)
        self.addCleanup(agent.kill)
        code = textwrap.dedent("""
            import torch, dlrun
            ctx = dlrun.init(rendezvous_timeout=30)
            print("sum", ctx.all_reduce_sum([ctx.rank + 1.0]), flush=True)
            """)
        for attempt in ("0", "1"):
            ranks = [subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      cwd=self.tmp,
                                      env=dict(self.env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                                               TORCHELASTIC_USE_AGENT_STORE="True",
                                               TORCHELASTIC_RESTART_COUNT=attempt))
                     for r in (0, 1)]
            for rank in ranks:
                out, _ = rank.communicate(timeout=120)
                self.assertEqual((rank.returncode, out), (0, "sum [3.0]\n"), out)
        # dlrun local inside a torchrun worker (the variable inherited): its ranks meet at their own store.
        r = self.dlrun("local", "-q", "--nproc", "2", PYTHON, "-c", code, cwd=self.tmp,
                       env=dict(self.env, TORCHELASTIC_USE_AGENT_STORE="True"))
        self.assertEqual((r.returncode, sorted(r.stdout.splitlines())), (0, ["[0] sum [3.0]", "[1] sum [3.0]"]),
                         r.stderr)

    def test_a_stop_during_the_rendezvous_ends_the_rank_at_once(self):
        # Rank 1 fails before it joins; rank 0 waits in dlrun.init() for it. dlrun stops rank 0,
        # which ended only at the end of --grace (its stop request waited for a step).
        waiting = os.path.join(self.tmp, "waiting")
        script = os.path.join(self.tmp, "early.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(f"""
                import os, sys, time
                if os.environ["RANK"] == "1":
                    while not os.path.exists({waiting!r}):
                        time.sleep(0.05)
                    time.sleep(2)  # rank 0 is in the rendezvous by then
                    sys.exit("bad config")
                import dlrun
                open({waiting!r}, "w").close()
                dlrun.init(rendezvous_timeout=600)
                """))
        p = self.start("local", "--nproc", "2", "--grace", "300", PYTHON, script, cwd=self.tmp)
        _, err = p.communicate(timeout=120)  # not the 300 s of --grace
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("rank 1 exited with code 1", err)
        self.assertNotIn("still running", err)

    def test_a_damaged_checkpoint_falls_back_and_none_left_is_a_checkpoint_error(self):
        out = self.python("""
            import os, torch, dlrun
            model = dlrun.DataParallel(torch.nn.Linear(3, 2))
            opt = torch.optim.Adam(model.parameters())
            ckpt = dlrun.Checkpoint([model, opt], directory="ck", keep_last=2)
            for step in (1, 2):
                with torch.no_grad():
                    model.module.bias.fill_(step)
                ckpt.save(step=step)
            def damage(step):
                path = f"ck/step-{step:012d}/state-model.txt"
                data = bytearray(open(path, "rb").read())
                data[len(data) // 2] ^= 0xFF
                open(path, "wb").write(bytes(data))
            damage(2)
            info = ckpt.restore()
            print("restored", info.step, float(model.module.bias[0]))
            damage(1)
            try:
                ckpt.restore()
            except dlrun.CheckpointError as e:
                print("CheckpointError |", e)
            """)
        self.assertIn("restored 1 1.0", out)
        self.assertRegex(out, r"CheckpointError \| none of the 2 checkpoints in ck can be loaded")


if __name__ == "__main__":
    unittest.main()
