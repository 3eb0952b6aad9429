"""``pregel generate-scene``, ``pregel convert-colmap`` and ``pregel sfm``: the commands that make scene files
(``odin_sched.scenes``)."""

import sys
import time


def add_generate_scene(sub) -> None:
    """Register ``pregel generate-scene`` and its flags on the subparsers ``sub``."""
    p = sub.add_parser("generate-scene", help="generate a synthetic Gaussian-splatting scene file",
                       description="Ground-truth Gaussians, cameras, rendered images and a noisy initial "
                                   "point cloud (as structure from motion gives) for training.")
    p.add_argument("--gaussians", type=int, required=True, help="ground-truth Gaussians G")
    p.add_argument("--cameras", type=int, required=True, help="cameras C (every 8th is held out)")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--height", type=int, default=128)
    p.add_argument("--layout", choices=("objects", "city"), default="objects",
                   help="objects on a ground plane with a camera ring, or a city-block grid with a "
                        "low fly-through (default %(default)s)")
    p.add_argument("--views-per-spot", type=int, default=1, metavar="K",
                   help="city: the fly-through stops at C / K spots and takes K views side by side at each "
                        "(8: every held-out camera sees what its spot's training cameras see; default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true", help="no progress bar or line")
    p.set_defaults(run=_run_generate_scene)


def _run_generate_scene(args) -> None:
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.scene_io import write_scene
    started = time.perf_counter()
    scene = generate_scene(args.gaussians, args.cameras, args.width, args.height, seed=args.seed,
                           layout=args.layout, views_per_spot=args.views_per_spot, progress=not args.quiet)
    write_scene(args.out, scene)
    print(f"wrote {args.out}: {args.layout} scene, {scene.num_gaussians:,} Gaussians, {scene.num_cameras} "
          f"cameras at {args.width} x {args.height}, {scene.init_means.shape[0]:,} initial points "
          f"in {time.perf_counter() - started:.1f} s")


def add_convert_colmap(sub) -> None:
    """Register ``pregel convert-colmap`` and its flags on the subparsers ``sub``."""
    p = sub.add_parser("convert-colmap", help="convert a COLMAP sparse model and its images to a scene file",
                       description="Read a COLMAP sparse model (text or binary), load its images and write "
                                   "a scene file with the 3D points as /init.")
    p.add_argument("sparse", metavar="SPARSE_DIR", help="folder with cameras/images/points3D .bin or .txt")
    p.add_argument("--images", required=True, help="folder of the images named in the model")
    p.add_argument("--out", required=True, help="scene file")
    p.add_argument("--downscale", type=float, default=1.0,
                   help="divide image size and intrinsics by N (the images must keep 16 pixels on a side)")
    p.add_argument("--heldout-every", type=int, default=8,
                   help="hold out every N-th image by name (at least 1 image is held out and 1 trained "
                        "on; default %(default)s)")
    p.set_defaults(run=_run_convert_colmap)


def _run_convert_colmap(args) -> None:
    from odin_sched.scenes.colmap import convert_colmap
    from odin_sched.scenes.scene_io import write_scene
    scene = convert_colmap(args.sparse, args.images, downscale=args.downscale, heldout_every=args.heldout_every)
    write_scene(args.out, scene)
    print(f"wrote {args.out}: {scene.num_cameras} cameras ({int(scene.heldout.sum())} held out) at "
          f"{scene.width} x {scene.height}, {scene.init_means.shape[0]:,} points in /init")


def add_sfm(sub) -> None:
    """Register ``pregel sfm`` and its flags on the subparsers ``sub``."""
    p = sub.add_parser("sfm", help="structure from motion on a folder of photos to a scene file (pycolmap)",
                       description="SIFT features, exhaustive matching and incremental mapping with pycolmap (as "
                                   "the reference 3DGS convert.py does with COLMAP), undistortion, then a scene "
                                   "file with the 3D points as /init. Needs pip install 'pregel-mpi[colmap]'.")
    p.add_argument("images", metavar="IMAGES_DIR", help="folder of photos (.jpg, .png, .tif, .bmp)")
    p.add_argument("--out", required=True, help="scene file")
    p.add_argument("--downscale", type=float, default=1.0,
                   help="divide image size and intrinsics by N (the images must keep 16 pixels on a side)")
    p.add_argument("--heldout-every", type=int, default=8,
                   help="hold out every N-th image by name (at least 1 image is held out and 1 trained "
                        "on; default %(default)s)")
    p.add_argument("--threads", type=int, default=-1, help="threads for pycolmap (default: all cores)")
    p.add_argument("--camera-model", default=None, metavar="MODEL",
                   help="the shared camera's COLMAP model: SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL or "
                        "OPENCV (default OPENCV, as the reference convert.py's --camera; a warning says when "
                        "few photos calibrate it to non-square pixels)")
    p.set_defaults(run=_run_sfm)


def _run_sfm(args) -> None:
    from odin_sched.scenes.scene_io import write_scene
    from odin_sched.scenes.sfm import photos_to_scene

    model = {} if args.camera_model is None else {"camera_model": args.camera_model}
    result = photos_to_scene(args.images, downscale=args.downscale, heldout_every=args.heldout_every,
                             threads=args.threads, **model)
    if result.warning is not None:
        print(f"warning: {result.warning.replace('camera model', '--camera-model')}", file=sys.stderr)
    write_scene(args.out, result.scene)
    scene = result.scene
    print(f"wrote {args.out}: {len(result.registered)} of {len(result.registered) + len(result.unregistered)} "
          f"photos registered ({int(scene.heldout.sum())} held out) at {scene.width} x {scene.height}, "
          f"{result.num_points:,} points in /init")
    if result.unregistered:
        print(f"not registered: {', '.join(result.unregistered)}")
