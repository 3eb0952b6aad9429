"""``pregel view`` and ``pregel render``: Gaussians shown in the browser or rendered to images."""

import os

from pregel.cli.common import require


def add_view(sub) -> None:
    """Register ``pregel view`` and its flags on the subparsers ``sub``."""
    p = sub.add_parser("view", help="view Gaussians in the browser, or watch training runs live",
                       description="Serve a page that draws a 3DGS .ply or trained scene file with WebGL2 (orbit, "
                                   "pan, zoom, the scene's cameras), or with --watch the live dashboard of the "
                                   "training runs writing into a folder. Only this machine can connect unless "
                                   "--host says otherwise.")
    p.add_argument("model", nargs="?", metavar="MODEL", help="3DGS .ply or trained scene .h5")
    p.add_argument("--scene", default=None, help="scene file whose cameras to offer (default: the model's own)")
    p.add_argument("--watch", default=None, metavar="OUT_DIR", help="the dashboard of the run writing into OUT_DIR")
    p.add_argument("--port", type=int, default=8000, help="default %(default)s; 0 picks a free one")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s: this machine only)")
    p.set_defaults(run=_run_view)


def _run_view(args) -> None:
    from odin_sched.view import server

    require((args.model is None) != (args.watch is None), "give either MODEL or --watch OUT_DIR")
    if args.watch is not None:
        require(os.path.isdir(args.watch), f"--watch {args.watch}: no such folder")
        require(args.scene is None, "--scene applies to MODEL, not to --watch")
        routes, what = server.dashboard_routes(args.watch), f"dashboard of {args.watch}"
    else:
        import json

        from odin_sched.view.model import load_view_model

        model_bin, info = load_view_model(args.model, args.scene)
        routes = server.viewer_routes(model_bin, json.dumps(info).encode())
        what = f"{info['count']:,} Gaussians of {args.model}"
    server.serve(server.make_server(routes, args.host, args.port), what)


def add_render(sub) -> None:
    """Register ``pregel render`` and its flags on the subparsers ``sub``."""
    p = sub.add_parser("render", help="render a scene's cameras (and an orbit) to images",
                       description="Write DIR/NNNN.png (NNNN = camera index) for the chosen cameras, "
                                   "rendered from the scene's Gaussians or a 3DGS .ply.")
    p.add_argument("--scene", required=True, help="scene file (cameras, and Gaussians unless --ply)")
    p.add_argument("--ply", default=None, help="render these Gaussians instead of the scene's")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--cameras", default=None, help="comma-separated camera indices (default: held-out ones)")
    p.add_argument("--orbit", type=int, default=0, metavar="N", help="also N frames orbiting the scene")
    p.add_argument("--orbit-format", choices=("gif", "mp4"), default="gif")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.set_defaults(run=_run_render)


def _run_render(args) -> None:
    from odin_sched.scenes.render_views import render_views

    written = render_views(args.scene, args.out, ply_path=args.ply, cameras=args.cameras, orbit=args.orbit,
                           orbit_format=args.orbit_format, device=args.device)
    print(f"wrote {len(written)} file(s) to {args.out}: {', '.join(os.path.basename(p) for p in written)}")
