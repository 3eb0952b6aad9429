"""Programs that run on the superstep engine: classic graph algorithms (and, later, GNN layers)."""

from vertex_programs.components import WeakComponents
from vertex_programs.pagerank import PageRank
from vertex_programs.shortest_paths import BreadthFirst, ShortestPaths

__all__ = ["BreadthFirst", "PageRank", "ShortestPaths", "WeakComponents"]
