"""`recall merge` writes as it fuses (merge/writer.py): no whole model in memory.

- the writer: tensors of mixed dtypes and shapes, written in any order, read back bit for bit by
  safetensors' own reader, in the layout safetensors writes (aligned); split in shards with an index;
- a merge (linear, task arithmetic, TIES, RECALL) of sharded inputs equals the whole-model merge that it
  replaced (every merged tensor collected by engine.fuse, the head beside it) bit for bit, written in
  shards as its source was, that from_pretrained opens.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from recall_cli.merge import engine
from recall_cli.merge.io import read_tensors
from recall_cli.merge.writer import Planned, StreamedCheckpoint, dtype_name

from conftest import make_run
from test_merge import merge, shard_weights, weights


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(7, 5, generator=g),
        "b.weight": torch.randn(3, 3, generator=g).to(torch.bfloat16),  # 18 bytes: misaligns what follows it
        "c.half": torch.randn(5, generator=g).to(torch.float16),
        "d.position_ids": torch.arange(9).unsqueeze(0),  # int64
        "e.scalar": torch.tensor(2.5),
        "f.empty": torch.zeros(0, 4),
        "g.mask": torch.tensor([True, False, True]),
        "h.double": torch.randn(2, 2, generator=g, dtype=torch.float64),
    }


def _plan(tensors: dict[str, torch.Tensor]) -> list[Planned]:
    return [Planned(k, dtype_name(t.dtype), tuple(t.shape)) for k, t in tensors.items()]


@pytest.mark.parametrize("shard_bytes", [None, 64])
def test_the_writer_reads_back_bit_for_bit_whatever_the_order(tmp_path, shard_bytes):
    tensors = _tensors()
    writer = StreamedCheckpoint(tmp_path, _plan(tensors), max_shard_bytes=shard_bytes)
    order = list(tensors)
    random.Random(3).shuffle(order)
    for key in order:
        writer.write(key, tensors[key])
    files = writer.close()
    if shard_bytes is None:
        assert [f.name for f in files] == ["model.safetensors"]
        assert not (tmp_path / "model.safetensors.index.json").exists()
    else:
        assert len(files) > 2 and all(f.name.endswith(f"-of-{len(files):05d}.safetensors") for f in files)
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        assert sorted(index["weight_map"]) == sorted(tensors)
        assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    read = {}
    for f in files:
        read.update(load_file(str(f)))
        with safe_open(str(f), "pt") as opened:
            assert opened.metadata() == {"format": "pt"}
        header_len = int.from_bytes(f.read_bytes()[:8], "little")
        assert header_len % 8 == 0
        header = json.loads(f.read_bytes()[8:8 + header_len])
        for key, entry in header.items():  # every tensor starts aligned to its element size, as safetensors lays it out
            if key != "__metadata__":
                assert entry["data_offsets"][0] % tensors[key].element_size() == 0, key
    assert read.keys() == tensors.keys()
    for key, tensor in tensors.items():
        assert read[key].dtype == tensor.dtype and torch.equal(read[key], tensor), key


def test_a_tensor_unlike_its_plan_or_one_never_written_is_refused(tmp_path):
    from recall_cli.errors import MergeError

    tensors = _tensors()
    writer = StreamedCheckpoint(tmp_path, _plan(tensors))
    with pytest.raises(MergeError, match="a F32 \\[3, 3\\] tensor where the output's header says BF16"):
        writer.write("b.weight", torch.zeros(3, 3))
    writer.write("a.weight", tensors["a.weight"])
    with pytest.raises(MergeError, match="the output lacks b.weight"):
        writer.close()


@pytest.fixture(scope="module")
def sharded(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """Two runs whose best/ is split in 3 shards, and a pretrained model in 2 (--base)."""
    root = tmp_path_factory.mktemp("stream")
    out = {}
    for name, seed in (("a", 1), ("b", 2)):
        run = make_run(root, name, tiny_model_dir, seed)
        shard_weights(run / "best")
        out[name] = run
    out["base"] = root / "base"
    shutil.copytree(tiny_model_dir, out["base"])
    shard_weights(out["base"], parts=2)
    samples = root / "samples.txt"
    samples.write_text("\n".join(["the film was a delight", "a dull script", "an instant classic",
                                  "nothing works here"] * 3) + "\n", encoding="utf-8")
    out["samples"] = samples
    return out


@pytest.mark.parametrize("method, extra", [
    ("linear", ("--weights", "0.3,0.7")), ("task_arithmetic", ("--lambda", "0.7")), ("ties", ("--density", "0.5")),
    ("recall", ("--clusters", "3")),
])
@pytest.mark.slow
def test_a_streamed_merge_equals_the_whole_model_merge_bit_for_bit(sharded, tmp_path, method, extra):
    from recall_cli.merge.linear import Linear
    from recall_cli.merge.task_arithmetic import TaskArithmetic
    from recall_cli.merge.ties import Ties

    out = tmp_path / "out"
    base = ("--base", sharded["base"]) if method in ("task_arithmetic", "ties") else ()
    code, output = merge(sharded["a"], sharded["b"], "--out", out, "--method", method, *extra, *base,
                         "--samples", sharded["samples"])
    assert code == 0, output
    record = json.loads((out / "merge.json").read_text())
    # the oracle: the way merge wrote before (engine.fuse's whole merged encoder, then each head beside it)
    sources = engine.open_sources([str(sharded["a"]), str(sharded["b"])])
    fuser = {"linear": lambda: Linear((0.3, 0.7)), "task_arithmetic": lambda: TaskArithmetic(0.7),
             "ties": lambda: Ties(1.0, 0.5),
             "recall": lambda: Linear({int(row["layer"]): row["weight"] for row in record["layers"]})}[method]()
    theta_star = engine.base_theta_star(sources, str(sharded["base"])) if fuser.needs_base else None
    whole = engine.fuse(sources, fuser, theta_star)
    for source in sources:
        folder = out / source.name
        expected = {source.key(n): t for n, t in whole.items()}
        expected.update(read_tensors(source.files, source.head + source.kept))
        got = weights(folder)
        assert got.keys() == expected.keys()
        for key, tensor in expected.items():
            assert got[key].dtype == tensor.dtype and torch.equal(got[key], tensor), (method, key)
        # written in shards as its source came (3 files), with an index; from_pretrained opens it
        shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
        assert len(shards) >= 2 and not (folder / "model.safetensors").exists()
        assert (folder / "model.safetensors.index.json").is_file()
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(out / "a"))
    got = weights(out / "a")
    assert all(torch.equal(p.detach(), got[n]) for n, p in model.named_parameters())
