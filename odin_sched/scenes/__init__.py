"""Scenes and their formats: the HDF5 scene file (``scene_io``), synthetic scenes (``scene_gen``),
COLMAP models (``colmap``), 3DGS PLY files (``ply``), Gaussians from a point cloud (``point_cloud``),
rendering a scene's views (``render_views``, on the device of ``render_device``), and the geometry
the trainers plan with: spatial cells of Gaussians (``cells``) and what a camera can see of them
(``visibility``).

May import ``pregel`` and ``kernels``; nothing else of ``odin_sched``.
"""
