"""``python -m flydsl.gpu_kit build|run``: see :mod:`flydsl.gpu_kit`."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flydsl.gpu_kit",
                                description="Build a GPU run kit here; run it on a GPU machine.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile every case for ARCH into the kit folder OUT")
    b.add_argument("--arch", default="sm_90", help="the GPU arch to compile for (sm_90)")
    b.add_argument("--out", required=True, metavar="OUT", help="the kit folder to write")
    r = sub.add_parser("run", help="run the kit's kernels offline; write results.json/.md")
    r.add_argument("kit", metavar="KIT", help="the kit folder")
    r.add_argument("--out", default=None, help="folder for the results (default: KIT)")
    r.add_argument("--only", default=None, help="comma-separated case names to run")
    r.add_argument("--stub-driver", action="store_true",
                   help="host arrays behind a stub libcuda (tests): launches, no checks")
    args = p.parse_args(argv)
    if args.command == "build":
        from .build import build
        build(args.arch, args.out)
        return 0
    from .run import run
    return run(args.kit, args.out, args.only, stub=args.stub_driver)


if __name__ == "__main__":
    sys.exit(main())
