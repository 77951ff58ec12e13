"""Model files as users really write them: sibling imports, chdir, prints, symlinks, FIFOs,
cyclic or deep containers, odd outputs and inputs, patched torch.profiler, hostile exceptions,
inputs changed in place, atexit handlers. Each bad one is one stderr line with its exit code."""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from battery.checks import REPO, assert_nothing_partial, latest_text
from battery.hostile import fails_cleanly, invoke, snapshot
from battery.hostile import home  # noqa: F401 - fixture

FAST = ("--steps", "1", "--warmup", "0")
HEAD = "import torch\nimport torch.nn as nn\n"
SIMPLE = HEAD + textwrap.dedent("""
    class Model(nn.Module):
        def forward(self, x):
            return torch.softmax(x, -1) * 2

    def get_inputs():
        return [torch.randn(4, 8)]
""")


def model_file(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(HEAD + textwrap.dedent(body))
    return path


def forward_model(directory: Path, name: str, forward: str, inputs: str = "[torch.randn(4, 8)]") -> Path:
    """A Model whose forward body is `forward` (indented by 8), get_inputs() returning `inputs`."""
    body = "class Model(nn.Module):\n    def forward(self, x):\n" + textwrap.indent(textwrap.dedent(forward), " " * 8)
    return model_file(directory, name, body + f"\n\ndef get_inputs():\n    return {inputs}\n")


def profiled(*args):
    result = invoke("profile", *args, *FAST)
    assert result.exit_code == 0, result.stderr[-3000:]
    return result


# ---------------------------------------------------------------- sys.path, chdir, prints


def test_a_sibling_module_is_importable(home, tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "layers.py").write_text(HEAD + "class Block(nn.Module):\n    def forward(self, x):\n"
                                              "        return x.softmax(-1)\n")
    model = model_file(tmp_path / "m", "model.py", """
        from layers import Block

        class Model(Block):
            pass

        def get_inputs():
            return [torch.randn(4, 8)]
    """)
    path_before = list(sys.path)
    profiled(model, "--out", tmp_path / "run")
    assert sys.path == path_before  # the model's directory is on sys.path only while its code runs


def test_two_models_with_the_same_sibling_name_get_their_own(tmp_path):
    from kernel_advisor.collect.loader import load_model

    outputs = {}
    for scale in (2, 3):
        d = tmp_path / f"m{scale}"
        d.mkdir()
        (d / "layers.py").write_text(f"SCALE = {scale}\n")
        model_file(d, "model.py", """
            import layers

            class Model(nn.Module):
                def forward(self, x):
                    return x * layers.SCALE

            def get_inputs():
                return [torch.ones(2)]
        """)
        loaded = load_model(d / "model.py", device="cpu")
        outputs[scale] = loaded.model(*loaded.inputs)
    assert outputs[2].tolist() == [2.0, 2.0] and outputs[3].tolist() == [3.0, 3.0]


def test_a_chdir_at_import_moves_neither_the_run_nor_latest(home, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = model_file(tmp_path, "chdir.py", f"""
        import os
        os.chdir({str(elsewhere)!r})
        with open("data.txt", "w") as f:  # the model's own relative paths are its directory's
            f.write("x")

        class Model(nn.Module):
            def forward(self, x):
                return x.softmax(-1)

        def get_inputs():
            assert open("data.txt").read() == "x"  # still in its own directory
            return [torch.randn(4, 8)]
    """)
    profiled(model, "--out", "myrun")
    assert os.getcwd() == str(tmp_path)
    assert (tmp_path / "myrun" / "run.json").is_file()
    assert not (elsewhere / "myrun").exists() and not (elsewhere / ".advisor").exists()
    profiled(model)
    latest = latest_text(home).strip()
    assert (home / "runs" / latest / "run.json").is_file()


def test_prints_never_reach_stdout_with_json(home, tmp_path):
    model = model_file(tmp_path, "chatty.py", """
        print("importing")

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                print("building")

            def forward(self, x):
                print("forward", x.shape)
                return x.softmax(-1)

        def get_inputs():
            print("inputs")
            return [torch.randn(4, 8)]
    """)
    result = profiled(model, "--json", "--out", tmp_path / "run")
    json.loads(result.stdout)  # stdout is our JSON and nothing else
    for said in ("importing", "building", "forward", "inputs"):
        assert said in result.stderr


# ---------------------------------------------------------------- what the model file is


def test_a_symlink_without_py_to_a_model_file_loads_as_source(home, tmp_path):
    source = tmp_path / "model_source"
    source.write_text(SIMPLE)
    link = tmp_path / "linked.py"
    link.symlink_to(source)
    profiled(link, "--out", tmp_path / "run")
    assert (tmp_path / "run" / "run.json").is_file() and (tmp_path / "run" / "ops.csv").stat().st_size > 0


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_a_model_path_that_is_not_a_regular_file_is_refused(home, tmp_path, kind):
    link = tmp_path / "model.py"
    if kind == "fifo":
        os.mkfifo(link)  # reading it would block until a writer came
    else:
        link.symlink_to("/dev/zero")
    says = ("a FIFO",) if kind == "fifo" else ("a device",)
    fails_cleanly(invoke("profile", link, *FAST), 1, ("not a regular file", *says))


# ---------------------------------------------------------------- containers


@pytest.mark.parametrize("inputs, forward, says", [
    ("[x]", "return x", ("nested more than 100",)),
    ("[torch.randn(4, 8)]", "out = [x * 2]\nout.append(out)\nreturn out", ("holds itself",)),
], ids=["5000-deep-inputs", "cyclic-output"])
def test_deep_or_cyclic_containers_are_one_line(home, tmp_path, inputs, forward, says):
    body = textwrap.dedent("""
        class Model(nn.Module):
            def forward(self, x):
                while isinstance(x, list):
                    x = x[0]
    """) + textwrap.indent(forward, " " * 8) + textwrap.dedent(f"""

        def get_inputs():
            x = torch.randn(4, 8)
            for _ in range(5000):
                x = [x]
            return {inputs}
    """)
    fails_cleanly(invoke("profile", model_file(tmp_path, "nest.py", body), *FAST), 1, says)


def test_a_shared_subcontainer_is_no_cycle():
    from kernel_advisor.collect.user_code import map_tensors, tensor_leaves

    t = torch.ones(1)
    shared = [t]
    assert [p for p, _ in tensor_leaves([shared, shared])] == ["output[0][0]", "output[1][0]"]
    assert map_tensors({"a": shared, "b": shared}, lambda x: x * 2)["b"][0].item() == 2.0


def test_defaultdict_inputs_keep_their_class(home, tmp_path):
    model = model_file(tmp_path, "ddict.py", """
        import collections

        class Model(nn.Module):
            def forward(self, d):
                assert isinstance(d, collections.defaultdict) and d["missing"] == []
                return d["x"].softmax(-1)

        def get_inputs():
            d = collections.defaultdict(list)
            d["x"] = torch.randn(4, 8)
            return [d]
    """)
    profiled(model, "--out", tmp_path / "run")


# ---------------------------------------------------------------- outputs, .to(), exceptions


def test_a_sparse_output_is_profiled(home, tmp_path):
    profiled(forward_model(tmp_path, "sparse.py", "return (x * 2).to_sparse()"), "--out", tmp_path / "run")
    assert "aten::mul" in (tmp_path / "run" / "ops.csv").read_text()


def test_a_meta_output_is_one_line(home, tmp_path):
    model = forward_model(tmp_path, "meta_out.py", "return x * 2, torch.empty(3, device='meta')")
    fails_cleanly(invoke("profile", model, *FAST), 1, ("output[1] is on the meta device",))


def test_a_model_whose_to_raises_is_one_line(home, tmp_path):
    model = model_file(tmp_path, "to_raises.py", """
        class Model(nn.Module):
            def to(self, *args, **kwargs):
                raise RuntimeError("cannot move me")

            def forward(self, x):
                return x * 2

        def get_inputs():
            return [torch.randn(4, 8)]
    """)
    fails_cleanly(invoke("profile", model, *FAST), 1, ("to_raises.py:6 in to", "cannot move me", "model.to"))


def test_an_exception_whose_str_raises_is_one_line(home, tmp_path):
    model = model_file(tmp_path, "str_raises.py", """
        class Weird(Exception):
            def __str__(self):
                raise ValueError("no")

        class Model(nn.Module):
            def forward(self, x):
                raise Weird()

        def get_inputs():
            return [torch.randn(4, 8)]
    """)
    fails_cleanly(invoke("profile", model, *FAST), 1, ("Weird (its message cannot be shown",))


def test_a_multi_line_message_shows_its_first_line(home, tmp_path):
    model = forward_model(tmp_path, "lines.py", "raise ValueError('first line\\nsecond line\\nthird')")
    line = fails_cleanly(invoke("profile", model, *FAST), 1, ("ValueError: first line …", "--debug"))
    assert "second" not in line
    debug = invoke("--debug", "profile", model, *FAST)
    assert "second line" in debug.stderr


@pytest.mark.parametrize("patch, says", [
    ("torch.profiler.profile.export_chrome_trace = lambda self, path: None",
     "torch.profiler.profile.export_chrome_trace"),
    ("torch.autograd.profiler.record_function.__enter__ = lambda self: 1 / 0",
     "torch.autograd.profiler.record_function.__enter__"),
], ids=["export", "record_function"])
def test_a_patched_torch_profiler_is_refused_and_restored(home, tmp_path, patch, says):
    import torch.autograd.profiler as autograd_profiler

    before = (vars(torch.profiler.profile).get("export_chrome_trace"),
              autograd_profiler.record_function.__enter__)
    model = tmp_path / "patches.py"
    model.write_text(SIMPLE + "\nimport torch.autograd.profiler\n" + patch + "\n")
    fails_cleanly(invoke("profile", model, *FAST), 1, (says, "monkeypatch"))
    assert (vars(torch.profiler.profile).get("export_chrome_trace"),
            autograd_profiler.record_function.__enter__) == before


@pytest.mark.parametrize("raised", [
    "MemoryError()",
    "RuntimeError('DefaultCPUAllocator: can\\'t allocate memory: you tried to allocate 1099511627776 bytes.')",
], ids=["MemoryError", "DefaultCPUAllocator"])
def test_host_out_of_memory_is_exit_2(home, tmp_path, raised):
    model = forward_model(tmp_path, "oom.py", f"raise {raised}")
    fails_cleanly(invoke("profile", model, *FAST), 2, ("memory ran out while running the forward pass",))


# ---------------------------------------------------------------- inputs changed in place


def test_an_input_changed_in_place_is_one_warning(home, tmp_path):
    model = forward_model(tmp_path, "inplace.py", "x.mul_(1000.0)\nreturn x.softmax(-1)")
    result = profiled(model, "--out", tmp_path / "run")
    warned = [line for line in result.stderr.splitlines() if "in place" in line]
    assert len(warned) == 1 and "inputs[0]" in warned[0] and warned[0].startswith("advisor: warning:")


def test_an_input_left_alone_is_not_warned_about(home, tmp_path):
    result = profiled(forward_model(tmp_path, "clean.py", "return x.softmax(-1)"), "--out", tmp_path / "run")
    assert "in place" not in result.stderr


# ---------------------------------------------------------------- atexit


def test_an_atexit_handler_registered_by_the_model_is_guarded(tmp_path, capsys):
    from kernel_advisor.collect.loader import load_model

    model = tmp_path / "exits.py"
    model.write_text(SIMPLE + textwrap.dedent("""
        import atexit

        @atexit.register
        def goodbye():
            print("bye")
            raise RuntimeError("exit handler broke\\nsecond line")
    """))
    load_model(model, device="cpu")
    assert atexit.register is not None and atexit.register.__module__ == "atexit"  # ours is gone again
    from kernel_advisor.collect import user_code

    guards = [g for gs in user_code._GUARDS.values() for g in gs]
    guards[-1]()  # what the interpreter runs at exit: no exception, one line, nothing on stdout
    atexit.unregister(guards[-1])
    captured = capsys.readouterr()
    assert captured.out == ""
    warned = [line for line in captured.err.splitlines() if line.startswith("advisor: warning:")]
    assert len(warned) == 1 and "goodbye raised RuntimeError: exit handler broke …" in warned[0]


@pytest.mark.slow
def test_an_atexit_traceback_never_follows_our_output(tmp_path):
    model = tmp_path / "exits.py"
    model.write_text(SIMPLE + "import atexit\natexit.register(lambda: 1 / 0)\n")
    env = {**os.environ, "ADVISOR_HOME": str(tmp_path / ".advisor"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "kernel_advisor", "profile", str(model), *FAST, "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    assert "Traceback" not in done.stderr and "ZeroDivisionError: division by zero; ignored" in done.stderr


def test_nothing_of_the_users_is_touched_by_a_refused_model(home, tmp_path):
    model = forward_model(tmp_path, "bad.py", "raise ValueError('a\\nb')")
    before = snapshot(model)
    fails_cleanly(invoke("profile", model, *FAST), 1)
    assert snapshot(model) == before
    assert_nothing_partial(home, None)
    assert not list(home.rglob("bad-*"))
