"""What each command reads and writes, checked by ``pregel.outputs.check_outputs`` before it starts."""

import os

COLMAP_FILES = tuple(f"{name}.{ext}" for name in ("cameras", "images", "points3D") for ext in ("bin", "txt"))


def _train_files(args) -> dict:
    from odin_sched.training.config import default_png

    png = args.png or default_png(args.out)
    return dict(inputs=[args.scene, args.init_ply],
                outputs=[("--out", args.out), ("--ply", args.ply), ("--png", png), ("--timeline", args.timeline),
                         ("--schedule-out", args.schedule_out)])


#: command -> its files, as ``pregel.outputs.check_outputs`` takes them; ``main`` checks them before the
#: command starts (a command missing here fails every run of it, and tests/test_reliability_outputs.py)
FILES = {
    "generate": lambda a: dict(outputs=[("--out", a.out)]),
    "convert": lambda a: dict(outputs=[("--out", a.out)], inputs=[a.edges, a.nodes]),
    "inspect": lambda a: {},
    "run": lambda a: dict(outputs=[("--out", a.out)], inputs=[a.graph],
                          output_folders=[("--checkpoint-dir", a.checkpoint_dir)]),
    "infer": lambda a: dict(outputs=[("--out", a.out)], inputs=[a.graph, a.model],
                            output_folders=[("--checkpoint-dir", a.checkpoint_dir)]),
    "generate-scene": lambda a: dict(outputs=[("--out", a.out)]),
    "train": _train_files,
    "convert-colmap": lambda a: dict(outputs=[("--out", a.out)], input_folders=[a.images],
                                     inputs=[os.path.join(a.sparse, name) for name in COLMAP_FILES]),
    "sfm": lambda a: dict(outputs=[("--out", a.out)], input_folders=[a.images]),
    "render": lambda a: dict(output_folders=[("--out", a.out)], inputs=[a.scene, a.ply]),
    "simulate": lambda a: dict(outputs=[("--out", a.out)], inputs=[a.scene]),
    "plot": lambda a: dict(outputs=[("--out", a.out)], inputs=a.files),
    "view": lambda a: {},  # reads MODEL, --scene and --watch; writes nothing
}
