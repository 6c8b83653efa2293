"""`wasmgate samples`: the hard examples a gateway kept for retraining.

- ``list [--json]``: one line per sample still on the gateway (not yet shipped): id, time,
  bundle@version, adapter, reason, size. ``--json``: the same as a JSON array.
- ``export --out DIR|FILE.jsonl``: every sample as a full document (payload and both answers
  base64): one ``<id>.json`` per sample in DIR, or one line per sample in FILE.jsonl.

The store file is ``store.path`` of the config (``--config``; default
``<state_dir>/store.db``) or ``--store FILE``. Safe while the daemon runs (read-only reader
of a WAL database); nothing is deleted.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from wasmgate.runtime.cli._common import EXIT_OK, CliError, SubParsers, say
from wasmgate.runtime.field.samples_read import KeptSample, SamplesUnreadable, read_samples
from wasmgate.runtime.field.setup import store_path
from wasmgate.runtime.ops.config import load_settings


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "samples",
        help="List or export the hard examples kept for retraining.",
        description="List or export the hard examples kept for retraining.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = actions.add_parser("list", help="One line per kept sample.")
    lst.add_argument("--json", action="store_true", help="Print a JSON array.")
    _store_args(lst)
    lst.set_defaults(func=_list)
    exp = actions.add_parser("export", help="Write every kept sample out in full.")
    exp.add_argument(
        "--out", type=Path, required=True, help="A directory, or a file ending in .jsonl."
    )
    _store_args(exp)
    exp.set_defaults(func=_export)


def _store_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="TOML config of the daemon.")
    parser.add_argument("--store", type=Path, default=None, help="The store file itself.")


def _samples(args: argparse.Namespace) -> list[KeptSample]:
    path = args.store if args.store is not None else store_path(load_settings(args.config))
    try:
        return read_samples(path)
    except SamplesUnreadable as e:
        raise CliError(str(e)) from None


def _summary(s: KeptSample) -> dict[str, object]:
    d = s.doc
    keys = ("at", "bundle", "version", "adapter", "reason")
    return {"id": s.id, **{k: d.get(k) for k in keys}, "bytes": s.size}


def _list(args: argparse.Namespace) -> int:
    rows = [_summary(s) for s in _samples(args)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        say("no samples kept")  # stderr: stdout stays empty for scripts
    for r in rows:
        at = r["at"]
        when = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if isinstance(at, float) else "?"
        )
        print(f"{r['id']:>6}  {when}  {r['bundle']}@{r['version']}  {r['adapter']}  "
            f"{r['reason']}  {r['bytes']} B")  # fmt: skip
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    samples = _samples(args)
    out: Path = args.out
    docs = [{"id": s.id, **s.doc} for s in samples]
    if out.suffix == ".jsonl":
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(d, sort_keys=True) + "\n" for d in docs))
    else:
        out.mkdir(parents=True, exist_ok=True)
        for d in docs:
            (out / f"{d['id']}.json").write_text(json.dumps(d, sort_keys=True, indent=2))
    say(f"exported {len(docs)} sample(s) to {out}")
    return EXIT_OK
