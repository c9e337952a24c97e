"""Whether a checkpoint fits this run's config (model, vocabulary, settings a resume may not change), as one
:class:`~xformer.errors.ConfigError` line with the overrides that make them agree; no torch/Lightning import."""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xformer.errors import ConfigError
from xformer.train.checkpoint_file import UnreadableCheckpoint, arch_name, build_model, read_checkpoint


def runtime_keys(cfg: DictConfig) -> list[str]:
    """``sweep.runtime_keys``: dotted keys that may differ between a job's run and its resume."""
    return list(OmegaConf.select(cfg, "sweep.runtime_keys", default=None) or [])


def check_ckpt_file(path: str) -> None:
    """``ckpt_path`` names an existing zip-format file (nothing loaded). Raises: ConfigError."""
    import zipfile

    if not os.path.isfile(path):
        raise ConfigError(f"ckpt_path={path}: no such file; give an existing .ckpt or ckpt_path=last")
    if not zipfile.is_zipfile(path):
        raise ConfigError(
            f"ckpt_path={path}: not a readable checkpoint (truncated or corrupt). Fix: use "
            f"another checkpoint, e.g. the job's checkpoints/last.ckpt or best-*.ckpt"
        )


def load_checkpoint_parts(path: str) -> tuple[dict | None, dict | None]:
    """``(state_dict, xformer section)`` of a checkpoint; ``(None, None)`` for a non-Lightning file.
    Raises: ConfigError when unreadable."""
    try:
        ckpt = read_checkpoint(path)
    except UnreadableCheckpoint as err:
        raise ConfigError(
            f"ckpt_path={path}: not a readable checkpoint ({err}). "
            f"Fix: use another checkpoint, e.g. the job's checkpoints/last.ckpt or best-*.ckpt"
        ) from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        return None, None
    return ckpt["state_dict"], ckpt.get("xformer") or None


def model_shape(model_cfg, src_vocab_size: int | None = None, tgt_vocab_size: int | None = None) -> str:
    """One phrase for a model config, e.g. ``decoder_only (d_model=64, n_heads=4, 0+2 layers, vocab 600)``."""
    get = (lambda k: model_cfg.get(k)) if hasattr(model_cfg, "get") else (lambda k: getattr(model_cfg, k, None))
    parts = [f"d_model={get('d_model')}", f"n_heads={get('n_heads')}"]
    if get("n_encoder_layers") is not None or get("n_decoder_layers") is not None:
        parts.append(f"{get('n_encoder_layers')}+{get('n_decoder_layers')} layers")
    if src_vocab_size is not None:
        parts.append(
            f"vocab {tgt_vocab_size}"
            if src_vocab_size == tgt_vocab_size
            else f"vocab {src_vocab_size}/{tgt_vocab_size}"
        )
    target = get("_target_") or type(model_cfg).__name__
    return f"{arch_name(target)} ({', '.join(parts)})"


def flat(node: dict | None, prefix: str = "", empty: bool = False) -> dict[str, Any]:
    """``{dotted key: value}`` of a nested dict's leaves; an empty dict is a leaf when ``empty``, else dropped."""
    out: dict[str, Any] = {}
    for key, value in (node or {}).items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and (value or not empty):
            out.update(flat(value, path, empty))
        else:
            out[path] = value
    return out


def _overrides_to(stored: dict, current: dict, prefix: str) -> list[str]:
    """``key=value`` overrides that turn ``current`` into ``stored`` (a model class as ``model/arch``)."""
    want, have = flat(stored, prefix), flat(current, prefix)
    out = []
    for key in sorted(set(want) | set(have)):
        if want.get(key) == have.get(key) or key.endswith("._partial_"):
            continue
        if key == "model._target_":
            out.insert(0, f"model/arch={arch_name(str(want.get(key)))}")
        elif key in want:
            out.append(f"{key}={'null' if want[key] is None else want[key]}")
    return out


def check_checkpoint_model(cfg: DictConfig, path: str) -> None:
    """The checkpoint was written by xformer and, in ``mode=train``, fits this run's model (built on the meta
    device with its vocabulary). Raises: ConfigError naming both models and the overrides that make them agree."""
    state, meta = load_checkpoint_parts(path)
    if state is None or meta is None:
        what = "a Lightning checkpoint from another program" if state is not None else "not a Lightning checkpoint"
        raise ConfigError(
            f"ckpt_path={path}: {what} (no 'xformer' section, so its model and tokenizer are "
            f"unknown). Fix: give a checkpoint written by run.py (<job dir>/checkpoints/last.ckpt "
            f"or best-*.ckpt), or drop ckpt_path to start from scratch"
        )
    if cfg.mode != "train":
        return
    src_v, tgt_v = int(meta["src_vocab_size"]), int(meta["tgt_vocab_size"])
    model = build_model(cfg, src_v, tgt_v, int(meta.get("pad_id", 0)), device="meta")
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = {
        k.replace("._orig_mod.", ".").removeprefix("model.").removeprefix("_orig_mod."): tuple(v.shape)
        for k, v in state.items()
        if k.startswith("model.")
    }
    if want == have:
        return
    stored = (meta.get("config") or {}).get("model") or {}
    current = OmegaConf.to_container(cfg.model, resolve=True)
    fix = _overrides_to(stored, current, "model")
    fix_text = " ".join(fix[:8]) + (" …" if len(fix) > 8 else "")
    raise ConfigError(
        f"ckpt_path={path}: the checkpoint holds {model_shape(stored, src_v, tgt_v)}, this run "
        f"builds {model_shape(current, src_v, tgt_v)}; its weights do not fit. Fix: "
        + (f"{fix_text} (the checkpoint's model), " if fix else "use the checkpoint's model settings, ")
        + "or drop ckpt_path to train this model from scratch"
    )


def check_checkpoint_vocab(cfg: DictConfig, path: str, dm) -> None:
    """The data's vocabulary sizes equal the checkpoint's. Raises: ConfigError naming both and the data keys
    to set."""
    _, meta = load_checkpoint_parts(path)
    if not meta:
        return
    ck = (int(meta["src_vocab_size"]), int(meta["tgt_vocab_size"]))
    run = (int(dm.src_vocab_size), int(dm.tgt_vocab_size))
    if ck == run:
        return
    stored = (meta.get("config") or {}).get("data") or {}
    fix = [
        o
        for o in _overrides_to(stored, OmegaConf.to_container(cfg.data, resolve=True), "data")
        if o.split("=", 1)[0] in ("data.vocab_size", "data.tokenizer", "data._target_", "data.n_symbols")
    ]
    raise ConfigError(
        f"ckpt_path={path}: the checkpoint's vocabulary has {ck[0]}/{ck[1]} (source/target) "
        f"tokens, this run's data {run[0]}/{run[1]}; its embeddings do not fit. Fix: "
        + (f"{' '.join(fix)} (the checkpoint's data), " if fix else "use the checkpoint's data settings, ")
        + "or drop ckpt_path to train from scratch"
    )


#: Keys (and all below them) a resumed run may not change: its model, data and order, loss, optimizer class.
SHAPING_KEYS = ("model", "data", "loss", "seed", "optim.optimizer._target_")
#: Keys the epoch conversion adds (:func:`xformer.config.steps.steps_from_epochs`; absent means None: all data) and
#: the trainer key each comes from. They shape the data too: the batches of an epoch, the validation examples.
CONVERTED_KEYS = {"data_epoch_batches": "trainer.limit_train_batches", "data_val_examples": "trainer.limit_val_batches"}
#: Keys that may differ from the checkpoint's without a word (besides ``sweep.runtime_keys``).
QUIET_KEYS = ("mode", "task_name", "callbacks", "module", "trainer.default_root_dir")


def under(key: str, prefixes) -> bool:
    """``key`` is one of ``prefixes`` or lies below one."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def check_resume_settings(cfg: DictConfig, path: str) -> list[tuple[str, Any, Any]]:
    """``[(key, checkpoint's value, this run's value)]`` where this training run's config differs from the
    checkpoint's (:data:`QUIET_KEYS`, ``sweep.runtime_keys`` and keys absent from either left out; an absent
    :data:`CONVERTED_KEYS` key is None); they take effect from the resumed step. Raises: ConfigError when a
    :data:`SHAPING_KEYS` or :data:`CONVERTED_KEYS` key differs."""
    if cfg.get("mode", "train") != "train":
        return []
    _, meta = load_checkpoint_parts(path)
    stored = (meta or {}).get("config")
    if not isinstance(stored, dict):
        return []
    ignore = [*runtime_keys(cfg), "hydra"]
    none = dict.fromkeys(CONVERTED_KEYS)
    want, have = {**none, **flat(stored)}, {**none, **flat(OmegaConf.to_container(cfg, resolve=True))}
    diff = [(k, want[k], have[k]) for k in sorted(set(want) & set(have)) if want[k] != have[k] and not under(k, ignore)]
    shaping = [d for d in diff if under(d[0], (*SHAPING_KEYS, *CONVERTED_KEYS))]
    if shaping:
        what = ", ".join(f"{k}: {old!r} (checkpoint) -> {new!r} (now)" for k, old, new in shaping[:4])
        more = f" and {len(shaping) - 4} more" if len(shaping) > 4 else ""
        fix = " ".join(  # a converted key: the trainer key the checkpoint's run set
            f"{CONVERTED_KEYS[k]}=<as the checkpoint's run had it: {'all' if old is None else old}>"
            if k in CONVERTED_KEYS
            else f"{k}={'null' if old is None else old}"
            for k, old, _ in shaping[:4]
        )
        raise ConfigError(
            f"ckpt_path={path}: this run changes what the checkpoint's model and data are ({what}{more}); "
            f"a resumed run continues them. Fix: {fix} (the checkpoint's values), or drop ckpt_path "
            f"to train these settings from scratch in a new folder"
        )
    return [d for d in diff if not under(d[0], QUIET_KEYS)]
