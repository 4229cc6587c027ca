"""A plain PyTorch hash grid (Müller et al. 2022): the peer the hash-grid preset is measured against.

Written as a PyTorch user would write it, with nothing of inr's engine: the tables one
nn.Parameter, each level's four corners gathered with index_select (autograd scatters the gradient
back with index_add), an nn.Linear ReLU MLP, torch.optim.Adam. It runs the same recipe from the
same start: the level table (resolutions, dense or hashed, offsets) and the hash's prime from
inr_cli.core.encodings, the initial parameters copied from ours, the preset's Adam settings and
cosine schedule, the same random batches (numpy_ops.batch_indices). Benchmarks only: PyTorch is
never a dependency of inr.
"""

from __future__ import annotations

import numpy as np

from benchmarks.torch_reference import build
from inr_cli.backends.numpy_ops import batch_indices
from inr_cli.core.encodings import HASH_PRIME, create_encoding
from inr_cli.core.schedule import learning_rate


class TorchHashGrid:
    """The hash grid's encoding in PyTorch: levels, corners and hash exactly as inr defines them."""

    def __init__(self, torch, spec, tables: np.ndarray, device: str):
        self.torch = torch
        grid = create_encoding(spec)
        self.features = grid.level_features
        self.levels = [tuple(int(v) for v in row) for row in grid.level_table]
        self.tables = torch.nn.Parameter(torch.from_numpy(np.array(tables, dtype=np.float32)).to(device))

    def __call__(self, x):
        torch = self.torch
        table = self.tables.view(-1, self.features)
        encoded = []
        for resolution, offset, size, hashed in self.levels:
            position = torch.clamp((x + 1.0) * (resolution / 2), 0, resolution)
            cell = torch.clamp(torch.floor(position), max=resolution - 1)
            fraction = position - cell
            i, j = cell[:, 0].long(), cell[:, 1].long()
            fx, fy = fraction[:, 0:1], fraction[:, 1:2]
            total = 0
            for di, dj, weight in ((0, 0, (1 - fx) * (1 - fy)), (1, 0, fx * (1 - fy)), (0, 1, (1 - fx) * fy),
                                   (1, 1, fx * fy)):
                a, b = i + di, j + dj
                if hashed:  # uint32 arithmetic, in int64 with the wrap made explicit
                    entry = torch.bitwise_xor(a, (b * HASH_PRIME) & 0xFFFFFFFF) % size
                else:
                    entry = a + b * (resolution + 1)
                total = total + weight * table.index_select(0, entry + offset)
            encoded.append(total)
        return torch.cat(encoded, dim=1)


class TorchHashGridTrainer:
    """One network: the hash grid, the MLP, Adam on both, the preset's schedule and batches."""

    def __init__(self, torch, spec, flat_params, coords, targets, config, seed: int, device: str = "cpu"):
        self.torch = torch
        grid = create_encoding(spec)
        flat_params = np.asarray(flat_params).reshape(1, -1)
        self.encoding = TorchHashGrid(torch, spec, flat_params[0, : grid.parameter_count], device)
        self.layers, _ = build(torch, spec, flat_params, device)
        parameters = [self.encoding.tables] + [p for layer in self.layers for p in layer.parameters()]
        opt = config.optimizer
        self.optimizer = torch.optim.Adam(parameters, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
        self.lr, self.lr_min, self.warmup = opt.lr, opt.lr_min, opt.warmup
        self.total = config.training.steps
        self.coords = torch.from_numpy(coords).to(device)
        self.targets = torch.from_numpy(targets).to(device)
        batch = config.training.batch_size
        self.batch = 0 if batch == 0 or batch >= len(coords) else batch
        self.seed = seed
        self.sigmoid = spec.model == "relu"
        self.step_index = 0
        self.loss = None

    def forward(self, x):
        h = self.encoding(x)
        for index, linear in enumerate(self.layers):
            h = linear(h)
            if index < len(self.layers) - 1:
                h = self.torch.relu(h)
        return self.torch.sigmoid(h) if self.sigmoid else h

    def step(self):
        torch = self.torch
        lr = learning_rate(self.step_index, self.total, self.lr, self.lr_min, self.warmup)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.batch:
            idx = torch.from_numpy(batch_indices(self.seed, self.step_index, self.batch, len(self.coords)))
            idx = idx.to(self.coords.device)
            x, t = self.coords[idx], self.targets[idx]
        else:
            x, t = self.coords, self.targets
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.mean((self.forward(x) - t) ** 2)
        loss.backward()
        self.optimizer.step()
        self.loss = loss
        self.step_index += 1

    def read_loss(self) -> float:
        return float(self.loss.item())

    def render(self, coords: np.ndarray) -> np.ndarray:
        with self.torch.no_grad():
            x = self.torch.from_numpy(coords).to(self.coords.device)
            return np.concatenate([self.forward(x[start:start + 65536]).cpu().numpy()
                                   for start in range(0, len(x), 65536)])
