"""Record or check the bench's Django decisions, row for row, by digest.

    python bench/golden_windows.py --record   # writes tests/golden/django_windows.json
    python bench/golden_windows.py            # checks against it; exit 1 on any change

The same requests as bench/construct.py (pools of 16, 64 and 256 over the Django 5.0.6
recon index), constructed on both arms and under a tight ceiling. Each decision is kept
as the sha256 of each part of what it wrote (tests/window_snapshots.py: the rendered
window, each table's rows), so the file holds no Django source and a change names the
part that moved. A refactor that changes no behaviour leaves every digest as it is.

The LAST line is the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from construct import POOL_SIZES, build_request, django_recon  # noqa: E402
from recon_index import DEFAULT_CACHE  # noqa: E402
from window_snapshots import decision_snapshot, digest, record_made_with  # noqa: E402

from ctxdb import ContextStore, load_settings  # noqa: E402

GOLDEN = BENCH.parent / "tests" / "golden" / "django_windows.json"
TIGHT_CEILING = 2_000


def snapshots(cache: Path) -> dict[str, dict[str, str]]:
    recon_path = str(django_recon(cache)[0])
    found = {}
    for label, changes in (("default", {}), ("tight", {"token_ceiling": TIGHT_CEILING})):
        settings = dataclasses.replace(load_settings(), **changes)
        with tempfile.TemporaryDirectory() as tmp, ContextStore.open(
            Path(tmp) / "golden.db", recon=recon_path, settings=settings
        ) as store:
            with store.engine.connect() as connection:
                requests = {n: build_request(connection, n, n) for n in POOL_SIZES}
            for size, request in requests.items():
                for arm in ("ctx08", "current"):
                    name = f"{label}-{size}-{arm}"
                    context = store.construct(dict(request, arm=arm, run_id=f"golden-{arm}"))
                    snapshot = decision_snapshot(store, context)
                    found[name] = {part: digest({part: rows}) for part, rows in snapshot.items()}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where the Django sdist and its recon index are kept")
    parser.add_argument("--record", action="store_true", help="write the golden file")
    args = parser.parse_args()
    found = snapshots(args.cache)
    if args.record:
        GOLDEN.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        record_made_with()
        print(f"recorded {len(found)} decisions in {GOLDEN}")
        print(f"decisions={len(found)} changed=0")
        return
    golden = json.loads(GOLDEN.read_text())
    changed = sorted(name for name in golden if found.get(name) != golden[name])
    for name in changed:
        parts = sorted(part for part in golden[name]
                       if found.get(name, {}).get(part) != golden[name][part])
        print(f"changed: {name}: {', '.join(parts)}")
    print(f"decisions={len(golden)} changed={len(changed)}")
    if changed:
        sys.exit(1)


if __name__ == "__main__":
    main()
