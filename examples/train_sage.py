"""Train a 2-layer GraphSAGE with PyG on a graph file, save it for `pregel infer`, check the result.

The graph needs ``/nodes/features`` and ``/nodes/labels`` (``pregel generate --features 16
--labels 4`` gives labels that the features predict). Training is full-batch on one process, on
a random 80 % of the vertices; the rest are the test set (the same split in both commands).

    pregel generate --nodes 200000 --avg-degree 10 --features 16 --labels 4 --seed 1 --out graph.h5
    python examples/train_sage.py train --graph graph.h5 --out sage.pt
    mpiexec -n 2 pregel infer --graph graph.h5 --model sage.pt --out scores.h5
    python examples/train_sage.py check --graph graph.h5 --model sage.pt --scores scores.h5

``check`` rebuilds the PyG model from the model file's weights, runs PyG's full-graph forward
pass, and prints the accuracy of both and their largest difference (exit status 1 above 1e-4).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_geometric.nn import SAGEConv  # noqa: E402

from pregel.graph_io import read_graph  # noqa: E402
from vertex_programs.gnn import save_model  # noqa: E402

TEST_FRACTION = 0.2
TOLERANCE = 1e-4


def load(path):
    """(x [N, F] float32, edge_index [2, E] int64, labels [N] int64) of a graph file."""
    graph = read_graph(path)
    if graph.features is None or graph.labels is None:
        sys.exit(f"{path}: needs /nodes/features and /nodes/labels (pregel generate --features F --labels C)")
    src = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    edge_index = torch.from_numpy(np.stack([src, graph.indices.astype(np.int64)]))
    return torch.from_numpy(graph.features), edge_index, torch.from_numpy(graph.labels)


def test_mask(num_nodes: int, seed: int) -> torch.Tensor:
    """[N] bool: the held-out vertices (a fixed random fifth for ``seed``)."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.random(num_nodes) < TEST_FRACTION)


def forward(layers, x, edge_index):
    """PyG's full-graph forward pass: relu between layers, none after the last."""
    for i, conv in enumerate(layers):
        x = conv(x, edge_index)
        if i < len(layers) - 1:
            x = F.relu(x)
    return x


def accuracy(scores, labels, mask) -> float:
    return float((scores.argmax(dim=1)[mask] == labels[mask]).float().mean())


def train(args) -> None:
    torch.manual_seed(args.seed)
    x, edge_index, labels = load(args.graph)
    test = test_mask(len(labels), args.seed)
    classes = int(labels.max()) + 1
    layers = torch.nn.ModuleList([SAGEConv(x.shape[1], args.hidden), SAGEConv(args.hidden, classes)])
    optimizer = torch.optim.Adam(layers.parameters(), lr=args.lr)
    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        optimizer.zero_grad()
        scores = forward(layers, x, edge_index)
        loss = F.cross_entropy(scores[~test], labels[~test])
        loss.backward()
        optimizer.step()
        if epoch % 2 == 0 or epoch == args.epochs:
            print(f"epoch {epoch:>3}  loss {loss.item():.4f}")
    with torch.no_grad():
        scores = forward(layers, x, edge_index)
    print(f"trained {args.epochs} epochs in {time.perf_counter() - started:.1f} s: "
          f"train accuracy {accuracy(scores, labels, ~test):.4f}, "
          f"test accuracy {accuracy(scores, labels, test):.4f}")
    save_model(args.out, list(layers))
    print(f"saved {args.out}")


def pyg_layers(model_path):
    """PyG ``SAGEConv`` modules with the weights of a model file (SAGE layers, relu only)."""
    data = torch.load(model_path, weights_only=True)
    if data.get("activation") != "relu" or any(r.get("kind") != "sage" for r in data["layers"]):
        sys.exit(f"{model_path}: this check handles SAGE layers with relu between them only")
    layers = []
    for record in data["layers"]:
        out_features, in_features = record["weights"]["lin_l.weight"].shape
        conv = SAGEConv(in_features, out_features, aggr=record["aggr"], normalize=record["normalize"],
                        bias=record["bias"], root_weight=record["root_weight"])
        conv.load_state_dict(record["weights"])
        layers.append(conv)
    return layers


def check(args) -> None:
    x, edge_index, labels = load(args.graph)
    test = test_mask(len(labels), args.seed)
    with torch.no_grad():
        expected = forward(pyg_layers(args.model), x, edge_index)
    with h5py.File(args.scores) as f:
        scores = torch.from_numpy(f["values"][:])
        ranks = int(f.attrs["ranks"])
    difference = float((scores - expected).abs().max())
    print(f"pregel infer ({ranks} ranks): test accuracy {accuracy(scores, labels, test):.4f}, "
          f"all vertices {accuracy(scores, labels, torch.ones_like(test)):.4f}")
    print(f"PyG forward pass:        test accuracy {accuracy(expected, labels, test):.4f}, "
          f"all vertices {accuracy(expected, labels, torch.ones_like(test)):.4f}")
    print(f"largest |pregel infer - PyG| = {difference:.2e} over {scores.numel():,} values "
          f"(tolerance {TOLERANCE:g})")
    if not difference <= TOLERANCE:
        sys.exit(1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train and save the model")
    p.add_argument("--graph", required=True)
    p.add_argument("--out", required=True, help="model file for pregel infer")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0, help="weights and train/test split")
    p.set_defaults(run=train)
    p = sub.add_parser("check", help="compare pregel infer's /values with PyG's forward pass")
    p.add_argument("--graph", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--scores", required=True, help="result file of pregel infer")
    p.add_argument("--seed", type=int, default=0, help="the train/test split used by train")
    p.set_defaults(run=check)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.run(args)


if __name__ == "__main__":
    main()
