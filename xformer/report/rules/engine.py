"""The engine: which declared claims a sweep asks about (docs/report.md § Which claims a report
decides), each part decided by its test type, and a claim's verdict from its parts (:func:`combine`).
"""

from __future__ import annotations

from pathlib import Path

from xformer.config_types import import_target

from ..aggregate import Sweep, aggregate_jobs
from .declare import Claim, DeclarationError, load_dir
from .evidence import missing_metric
from .part import Part
from .reasons import reason
from .results import CANNOT_SHOW, INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimResult, PartResult
from .tests import Context, NotCovered, result, test_type

REPO = Path(__file__).resolve().parents[3]
CLAIMS_DIR = REPO / "claims"
"""The project's claim declarations, one YAML file per claim."""


def project_claims(folder: Path = CLAIMS_DIR) -> list[Claim]:
    """The project's declared claims (:func:`.declare.load_dir` of :data:`CLAIMS_DIR`)."""
    return load_dir(folder)


def sweep_names(sweep: Sweep) -> set[str]:
    """The experiments the sweep's jobs ran (``claims/<name>`` → ``<name>``)."""
    return {name for j in sweep.jobs if (name := _experiment_of(j))}


def _not_covered(part: Part, what: str, sweep: str = "") -> PartResult:
    return result(part, INCONCLUSIVE, reason("not covered", what=what), problems=["not covered"], sweep=sweep)


def decide_part(part: Part, ctx: Context, strict: bool = False) -> PartResult:
    """One part decided by its test type. The sweep lacking what it needs makes it inconclusive
    ("not covered"), or with ``strict`` (a researcher's own file) a :class:`DeclarationError`."""
    fn = test_type(part.test)
    try:
        steps = part.test == "threshold" and part.get("mode") == "steps"  # its metric is a curve
        if part.metric and part.test != "quantity" and ctx.sweep.jobs and not steps:
            gone = missing_metric(ctx.sweep, part.metric)
            if gone is not None:
                known = ", ".join(m for m in ctx.sweep.metric_keys if "/" in m)
                raise NotCovered(f"metric '{gone}' is not in the sweep (it has: {known})", "metric")
        return fn(part, ctx)
    except NotCovered as e:
        if strict:
            fix = (
                "fix: use one of the metrics listed"
                if e.key == "metric"
                else "fix: select values the sweep ran (or run them)"
            )
            raise DeclarationError(f"{part.where(e.key)}: {e}; {fix}") from e
        return _not_covered(part, str(e))


def _labels(parts: list[PartResult]) -> str:
    return ", ".join(p.label for p in parts)


def combine(parts: list[PartResult]) -> tuple[str, str]:
    """A claim's verdict and reason from its decided parts (over all its sweeps).

    A failed precondition makes the claim "cannot show it". A refuted claim part counts toward "not
    supported" only when every precondition of its own sweep is supported; otherwise the claim is
    "cannot show it", naming the precondition not established. Support needs every claim part
    supported and every precondition established; anything else is inconclusive."""
    pre = [p for p in parts if p.role == "precondition"]
    main = [p for p in parts if p.role == "claim"]
    failed = [p for p in pre if p.verdict == NOT_SUPPORTED]
    if failed:
        return CANNOT_SHOW, reason("precondition fails", parts=_labels(failed))
    if not main:
        return INCONCLUSIVE, reason("no claim part")

    def gate(p: PartResult) -> list[PartResult]:
        return [q for q in pre if q.verdict != SUPPORTED and (not q.sweep or not p.sweep or q.sweep == p.sweep)]

    refuted = [p for p in main if p.verdict == NOT_SUPPORTED]
    standing = [p for p in refuted if not gate(p)]
    if standing:
        return NOT_SUPPORTED, reason("claim refuted", parts=_labels(standing))
    if refuted:
        open_pre = list({id(q): q for p in refuted for q in gate(p)}.values())
        return CANNOT_SHOW, reason("cannot show", parts=_labels(open_pre), refuted=_labels(refuted))
    undecided_pre = [p for p in pre if p.verdict != SUPPORTED]
    if all(p.verdict == SUPPORTED for p in main) and not undecided_pre:
        return SUPPORTED, reason("claim supported", parts=_labels(main))
    if undecided_pre and all(p.verdict == SUPPORTED for p in main):
        return INCONCLUSIVE, reason("precondition open", parts=_labels(undecided_pre))
    words = "; ".join(f"{p.label} {p.verdict}" + (f" ({p.problems[0]})" if p.problems else "") for p in main)
    partly = any(p.verdict == SUPPORTED for p in main)
    return INCONCLUSIVE, reason("claim partly" if partly else "claim open", parts=words)


def _experiment_of(job) -> str:
    exp = job.choices.get("experiment") or job.overrides.get("experiment")
    return str(exp).rsplit("/", 1)[-1] if exp else ""


def decide_claim(
    claim: Claim, sweep: Sweep, bench: dict | None = None, strict: bool = False, parts: list[Part] | None = None
) -> ClaimResult:
    """``claim`` decided on ``sweep`` over all its parts (``parts``: only these, for a guessed claim):
    each part on the jobs of the sweep it reads; a part whose sweep is not among the jobs is "not
    covered", naming it."""
    names = sweep_names(sweep)
    chosen = list(claim.parts) if parts is None else parts
    contexts: dict[str, Context] = {}
    results = []
    for p in chosen:
        want = p.get("sweep") or next((s for s in claim.sweeps if s in names), "")
        if names and want and want not in names:
            r = _not_covered(p, f"it reads sweep {want}, which is not among these jobs", want)
            r.problems.append("other sweep")
            results.append(r)
            continue
        if want not in contexts:  # the jobs that ran experiment ``want`` (all when they record one)
            own = [j for j in sweep.jobs if _experiment_of(j) == want]
            contexts[want] = Context(aggregate_jobs(own, sweep.dirs) if want and len(names) > 1 else sweep, bench)
        r = decide_part(p, contexts[want], strict)
        r.sweep = want if len(claim.sweeps) > 1 else ""
        results.append(r)
    present = [r for r in results if "other sweep" not in r.problems]
    verdict, why = combine(present)
    jobs = [j for p in results for a in p.arms for j in a.jobs]
    here = sorted({p.sweep for p in results if "other sweep" not in p.problems and p.sweep}) or sorted(names)
    return ClaimResult(
        claim=claim.name,
        statement=claim.statement,
        verdict=verdict,
        reason=why,
        parts=results,
        budget=budget(jobs),
        sweep=", ".join(here),
        published=claim.published,
        headline=claim.headline,
        source=claim.source,
        file=claim.file,
        at=claim.at,
        scope="" if len(present) == len(results) else ", ".join(sorted({r.sweep for r in present if r.sweep})),
    )


def _covered(part: Part, ctx: Context) -> bool:
    try:
        decide_part(part, ctx, strict=True)
    except DeclarationError:
        return False
    return True


def applicable(
    claims: list[Claim], sweep: Sweep, bench: dict | None = None
) -> tuple[list[tuple[Claim, list[Part] | None]], str]:
    """The claims the sweep asks about, each with the parts to decide (``None``: those reading the
    sweep), and a note when they were guessed: jobs that record no experiment get each claim with a
    part that compares arms the sweep has (only those parts), and the claims measured by ``xformer
    bench`` when a bench file is given."""
    names = sweep_names(sweep)
    if names:
        return [(c, None) for c in claims if set(c.sweeps) & names], ""
    if not sweep.swept_keys and bench is None:  # one setting: there is nothing to compare
        return [], "the jobs vary no setting and record no experiment, so no claim is decided (sweep a key with -m)"
    ctx = Context(sweep, bench)
    found: list[tuple[Claim, list[Part] | None]] = []
    for c in claims:
        if c.bench:
            if bench is not None:
                found.append((c, list(c.parts)))
            continue
        arms = [p for p in c.parts if p.test != "quantity" and sweep.jobs and _covered(p, ctx)]
        if any(p.role == "claim" for p in arms):
            found.append((c, arms))
    note = (
        "the jobs record no experiment (no `experiment=claims/<sweep>`), so the claims were guessed: each "
        "is decided on its parts whose arms, levels, metric and preconditions (such as equal parameter counts) "
        "this sweep has; the published figures are the paper's setting, not this task's"
        if found
        else "the jobs record no experiment, and no declared claim finds here the levels, settings and metric its "
        "parts need, so none is decided (decide your own with --claims FILE)"
    )
    return found, note


def evaluate(
    sweep: Sweep, claims: list[Claim] | None = None, bench: dict | None = None, strict: bool = False
) -> tuple[list[ClaimResult], str]:
    """Decide ``claims`` on ``sweep``: a researcher's own (``strict``: every one, bad input raises
    :class:`DeclarationError`), or the project's that the sweep asks about (:func:`applicable`).
    Returns the results and the note on how the claims were chosen."""
    if claims is not None and strict:
        return [decide_claim(c, sweep, bench, strict=True, parts=list(c.parts)) for c in claims], ""
    chosen, note = applicable(project_claims() if claims is None else claims, sweep, bench)
    out = [decide_claim(c, sweep, bench, parts=parts) for c, parts in chosen]
    for r in out:
        r.note = note
    return out, note


def count_text(n: float) -> str:
    """``1234567`` → ``1.23 M``; ``12345`` → ``12.3 k``."""
    return f"{n / 1e6:.3g} M" if n >= 1e6 else f"{n / 1e3:.3g} k" if n >= 1e3 else f"{n:.0f}"


def _schedule(cfg: dict) -> str:
    """``warm-up W + <the schedule's own words>, peak lr X``: a schedule function describes itself
    (``describe`` of :func:`xformer.train.schedules.describes`); an unknown one is named by its target."""
    optim = cfg.get("optim") or {}
    sched = optim.get("scheduler") or {}
    target = str(sched.get("_target_") or "") if isinstance(sched, dict) else ""
    warm, lr = optim.get("warmup_steps"), optim.get("lr")
    words = target.rsplit(".", 1)[-1]
    fn, _ = import_target(target) if target else (None, None)
    if fn is not None and hasattr(fn, "describe"):
        try:
            words = fn.describe(**sched)
        except (KeyError, ValueError, TypeError):  # a node from before a key was added: its name only
            pass
    text = " + ".join(p for p in (f"warm-up {warm}" if warm is not None else "", words) if p)
    return text + (f", peak lr {lr:g}" if isinstance(lr, (int, float)) else "")


def budget(jobs: list) -> str:
    """The training budget of the compared settings: steps (``trainer.max_steps``, else those run), tokens
    seen by a finished run (characters for tiny-shakespeare) and the LR schedule, e.g. ``"3 000 steps,
    6.1 M characters, warm-up 100 + linear decay to 0× peak, peak lr 0.003"``; token counts as a range."""
    steps, scheds, unit = set(), [], "tokens"
    counts: list[int] = []
    for j in {id(j): j for j in jobs}.values():
        cfg = j.config or {}
        ms = (cfg.get("trainer") or {}).get("max_steps")
        s = ms if isinstance(ms, int) and ms > 0 else j.global_step
        if s is not None:
            steps.add(s)
        if j.finished and j.tokens_seen:
            counts.append(int(j.tokens_seen))
        sch = _schedule(cfg)
        if sch and sch not in scheds:
            scheds.append(sch)
        if str((cfg.get("data") or {}).get("_target_", "")).endswith("TinyShakespeareDataModule"):
            unit = "characters"
    parts = []
    if steps:
        parts.append("/".join(f"{s:,}".replace(",", " ") for s in sorted(steps)) + " steps")
    if counts:
        lo, hi = count_text(min(counts)), count_text(max(counts))
        parts.append((lo if lo == hi else f"{lo}–{hi}") + f" {unit}")
    parts += ["; ".join(scheds)] if scheds else []
    return ", ".join(parts)
