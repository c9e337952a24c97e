"""Every option of every model group trains, alone through the whole driver and in every combination
through the model + loss; and a variant added from outside the repository works through Hydra's search path."""

import itertools
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from tests.conftest import REPO
from xformer.jobs.context import job_context
from xformer.jobs.driver import run as run_job
from xformer.train.checkpoint_file import build_model
from xformer.train.module import TransformerLitModule

CONF = str(REPO / "conf")
GROUPS = {
    g: sorted(p.stem for p in (REPO / "conf" / "model" / g).glob("*.yaml"))
    for g in ("arch", "mixer", "attention", "norm", "pe", "ffn")
}
TINY_MODEL = [
    "model.d_model=16",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "model.dropout=0.0",
    "model.max_len=128",
]


def test_groups_are_discovered_and_the_readme_names_every_option():
    """The groups come from conf/ (no list to keep here); the README's group table names each option."""
    readme = (REPO / "README.md").read_text()
    for group, options in GROUPS.items():
        assert options, group
        row = next(line for line in readme.splitlines() if line.startswith(f"| `model/{group}` |"))
        for option in options:
            assert f"`{option}`" in row, (group, option)


def _cfg(overrides, tmp_path):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                *overrides,
                f"paths.output_dir={tmp_path}",
                f"paths.root_dir={tmp_path}",
                f"paths.cache_dir={tmp_path / 'cache'}",
            ],
        )


SINGLE = [(g, o) for g, opts in GROUPS.items() for o in opts if g != "attention" or o != "local"] + [
    ("attention", "local")
]


@pytest.mark.parametrize("group,option", SINGLE, ids=[f"{g}={o}" for g, o in SINGLE])
def test_every_option_trains_through_the_driver(group, option, tmp_path):
    data = (
        ["data=reverse", "data.n_train=200", "data.n_val=20", "data.n_test=20", "data.train_max_len=8"]
        if option == "encoder_only"
        else ["data.n_train=200", "data.n_val=20", "data.n_test=20", "data.n_long=5"]
    )
    cfg = _cfg(
        [
            f"model/{group}={option}",
            *TINY_MODEL,
            *data,
            "logger=csv",
            "trainer.max_steps=4",
            "trainer.val_check_interval=2",
            "trainer.enable_progress_bar=false",
            "decode.max_len_b=4",
            "trainer.log_every_n_steps=1",
        ],
        tmp_path,
    )
    run_job(cfg, job_context(cfg))
    import json

    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["global_step"] == 4
    assert all(v == v for v in metrics["metrics"].values())  # no NaN
    choice = {"arch": "_target_"}.get(group)
    if choice:
        assert metrics["config"]["model"]["_target_"].endswith(
            {"encoder_decoder": "EncoderDecoder", "decoder_only": "DecoderOnly", "encoder_only": "EncoderOnly"}[option]
        )


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("groups")
    out = {}
    for name, data in (
        ("numbers", ["data.n_train=64", "data.n_val=8", "data.n_test=8", "data.n_long=4"]),
        ("reverse", ["data=reverse", "data.n_train=64", "data.n_val=8", "data.n_test=8", "data.train_max_len=8"]),
    ):
        cfg = _cfg(data, tmp)
        dm = instantiate(cfg.data)
        dm.setup("fit")
        out[name] = (dm, next(iter(dm.train_dataloader())))
    return out


@pytest.mark.slow  # suite time: ~26 s; each option alone trains through the driver in the fast set
def test_the_whole_product_of_model_groups_trains(batches):
    """3 arch × 3 attention × 4 norm × 6 pe × 3 ffn = 648 models, each takes 3 Adam steps; loss must fall.

    Each group option is composed by Hydra once; the 648 model configs are merges of those nodes.
    """
    from omegaconf import OmegaConf

    names = ("arch", "attention", "norm", "pe", "ffn")
    nodes = {}
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        base = compose(
            "config", overrides=[*TINY_MODEL, "paths.output_dir=/tmp", "paths.cache_dir=/tmp", "paths.root_dir=/tmp"]
        )
        for g in names:
            for o in GROUPS[g]:
                node = compose(
                    "config",
                    overrides=[
                        f"model/{g}={o}",
                        "paths.output_dir=/tmp",
                        "paths.cache_dir=/tmp",
                        "paths.root_dir=/tmp",
                    ],
                ).model
                nodes[g, o] = {"_target_": node._target_} if g == "arch" else {g: OmegaConf.to_container(node[g])}
    base = OmegaConf.to_container(base)
    combos = list(itertools.product(*(GROUPS[g] for g in names)))
    assert len(combos) == 648
    small = {k: v[:8] if isinstance(v, torch.Tensor) else v for k, v in batches["numbers"][1].items()}
    small_rev = {k: v[:8] if isinstance(v, torch.Tensor) else v for k, v in batches["reverse"][1].items()}
    for combo in combos:
        model_cfg = dict(base["model"])
        for g, o in zip(names, combo, strict=False):  # each group node replaces the default's node
            model_cfg.update(nodes[g, o])
        cfg = OmegaConf.create({**base, "model": model_cfg})
        arch = combo[0]
        dm, batch = (batches["reverse"][0], small_rev) if arch == "encoder_only" else (batches["numbers"][0], small)
        torch.manual_seed(0)
        model = build_model(cfg, dm.src_vocab_size, dm.tgt_vocab_size, dm.pad_id)
        assert (
            type(model).__name__
            == {"encoder_decoder": "EncoderDecoder", "decoder_only": "DecoderOnly", "encoder_only": "EncoderOnly"}[arch]
        )
        module = TransformerLitModule(model, optimizer=None, lr_lambda=None, pad_id=dm.pad_id, eos_id=dm.eos_id)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(3):
            logits, labels = module.logits_and_labels(batch)
            loss = module.loss(logits, labels, 0.0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        assert all(torch.isfinite(torch.tensor(losses))), combo
        assert losses[-1] < losses[0], (combo, losses)


def test_a_variant_added_from_outside_the_repo(tmp_path):
    """README "Adding a variant": one class + one YAML, found through hydra.searchpath."""
    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "my_pe.py").write_text(
        textwrap.dedent('''
        import torch
        from xformer.model import PositionalEncoding

        class Linear(PositionalEncoding):
            """Bias -slope*|i-j| with one learned slope per head."""
            def __init__(self, d_model, n_heads, d_head, max_len=None, causal=False):
                super().__init__(d_model, n_heads, d_head, max_len, causal)
                self.slope = torch.nn.Parameter(torch.full((n_heads,), 0.1))
            def attn_bias(self, q_pos, k_pos):
                return -self.slope[:, None, None] * (q_pos[:, None] - k_pos[None, :]).abs()
    ''')
    )
    conf = tmp_path / "my_conf" / "model" / "pe"
    conf.mkdir(parents=True)
    (conf / "linear.yaml").write_text("_target_: my_pkg.my_pe.Linear\n_partial_: true\n")
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "WANDB_MODE": "offline",
        "XFORMER_CACHE": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    res = subprocess.run(
        [
            sys.executable,
            str(REPO / "run.py"),
            f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]",
            "model/pe=linear",
            *TINY_MODEL,
            "data.n_train=100",
            "data.n_val=10",
            "data.n_test=10",
            "data.n_long=5",
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            "logger=csv",
            f"hydra.run.dir={tmp_path / 'job'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    metrics = json.loads((tmp_path / "job" / "metrics.json").read_text())
    assert metrics["config"]["model"]["pe"]["_target_"] == "my_pkg.my_pe.Linear"
    assert metrics["params"]["positional"] == 2 * 2  # one slope per head, encoder + decoder stacks


@pytest.mark.parametrize("group", ["loss", "decode"])
def test_loss_and_decode_options_name_their_class(group, tmp_path):
    """Like every other group, each loss/decode option is one class chosen by ``_target_``,
    and the training module uses the instantiated object."""
    from hydra.utils import get_class

    from xformer.jobs.driver import build_module

    options = sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))
    for option in options:
        cfg = _cfg([f"{group}={option}", *TINY_MODEL, "loss.label_smoothing=0.2"], tmp_path)
        node = cfg[group]
        assert "_target_" in node, f"conf/{group}/{option}.yaml has no _target_"
        obj = instantiate(node)
        assert isinstance(obj, get_class(node._target_))
        dm = instantiate(cfg.data)
        module = build_module(cfg, dm, build_model(cfg, 20, 20, 0))
        if group == "loss":
            assert module.criterion.label_smoothing == 0.2
            logits, labels = torch.randn(2, 3, 20), torch.tensor([[4, 5, 0], [6, 0, 0]])
            want = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), labels.flatten(), ignore_index=0, label_smoothing=0.2
            )
            torch.testing.assert_close(module.loss(logits, labels), want)
        else:
            assert module.decode_cfg["beam_size"] == node.beam_size and module.decode_cfg["alpha"] == node.alpha


def test_a_factory_variant_yaml_without_partial_is_one_line_naming_the_fix(tmp_path):
    """An FFN variant whose YAML leaves out ``_partial_: true`` (the model passes ``d_model, d_ff, dropout``
    when it builds each layer): one ``error:`` line naming the node, the arguments and the fix, exit 2,
    checked against the class's own signature (was: Hydra's TypeError from the instantiation, exit 1)."""
    import inspect

    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "my_ffn.py").write_text(
        textwrap.dedent("""
        import torch

        class SquaredReLU(torch.nn.Module):
            def __init__(self, d_model, d_ff, dropout):
                super().__init__()
                self.up, self.down = torch.nn.Linear(d_model, d_ff), torch.nn.Linear(d_ff, d_model)
            def forward(self, x):
                return self.down(self.up(x).relu() ** 2)
    """)
    )
    conf = tmp_path / "my_conf" / "model" / "ffn"
    conf.mkdir(parents=True)
    (conf / "sqrelu.yaml").write_text("_target_: my_pkg.my_ffn.SquaredReLU\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = [f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]", "model/ffn=sqrelu", "sweep.dry_run=true"]
    res = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=tmp_path,  # the run's folder, if any, under the test's own folder
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: model.ffn._target_=my_pkg.my_ffn.SquaredReLU"), errors
    sys.path.insert(0, str(tmp_path))
    try:
        from my_pkg.my_ffn import SquaredReLU
    finally:
        sys.path.remove(str(tmp_path))
    needed = [p for p in inspect.signature(SquaredReLU).parameters]
    assert f"it needs {', '.join(needed)}," in errors[0] and "Fix: add `_partial_: true`" in errors[0]
