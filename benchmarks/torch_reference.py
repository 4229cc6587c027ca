"""An independent PyTorch implementation of the same networks, optimizer and schedule.

Used by the benchmarks only (PyTorch is never a dependency of inr): same layer sizes, same
initialisation (copied from our parameters), Adam with the configuration's betas and epsilon
(`optimizer_settings`), the same learning-rate schedule (warm-up, cosine: core/schedule.py).
"""

from __future__ import annotations

import math

import numpy as np

from inr_cli.core.schedule import learning_rate


def optimizer_settings(optimizer) -> dict:
    """torch.optim.Adam's betas and eps, and the schedule's warm-up, from inr's optimizer settings: the
    peer runs the same recipe."""
    return {"betas": (optimizer.beta1, optimizer.beta2), "eps": optimizer.eps, "warmup": optimizer.warmup}


def build(torch, spec, flat_params: np.ndarray, device: str):
    """nn.Linear layers holding our initial parameters (and the fixed Fourier matrix, if any)."""
    from inr_cli.core.network import frequency_view, layer_views

    flat_params = np.asarray(flat_params).reshape(1, -1)
    frequencies = frequency_view(spec, flat_params)
    encoding = None if frequencies is None else torch.from_numpy(np.array(frequencies[0])).to(device)
    layers = []
    for weight, bias in layer_views(spec, flat_params):
        weight, bias = weight[0], bias[0]
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(np.array(weight)))
            linear.bias.copy_(torch.from_numpy(np.array(bias)))
        layers.append(linear.to(device))
    return layers, encoding


def forward(torch, spec, layers, x, encoding=None):
    if encoding is not None:
        angle = 2 * math.pi * x @ encoding.T
        x = torch.cat([torch.cos(angle), torch.sin(angle)], dim=1)
    for index, linear in enumerate(layers):
        x = linear(x)
        last = index == len(layers) - 1
        if spec.model == "siren":
            x = x if last else torch.sin(spec.omega0 * x)
        elif spec.model == "relu" and not last:
            x = torch.relu(x)
        else:
            x = torch.sigmoid(x)
    return x


def use_tf32(torch, enabled: bool) -> None:
    """PyTorch's FP32 matmuls on TF32 tensor cores, or not. set_float32_matmul_precision is the one
    switch that every PyTorch since 1.12 and its compiler read alike (PyTorch 2.9+ refuses a mix of
    its older allow_tf32 flag and the newer fp32_precision)."""
    torch.set_float32_matmul_precision("high" if enabled else "highest")


class TorchTrainer:
    """One network, trained the way a PyTorch user would: nn.Linear layers, Adam, cosine schedule.
    compile_mode (None: eager) compiles the loss (forward, and so its backward) and the optimizer's
    step with torch.compile in that mode ("default", "reduce-overhead", "max-autotune")."""

    def __init__(self, torch, spec, flat_params, coords, targets, lr, lr_min, total_steps, batch_size, seed, device,
                 compile_mode: str | None = None, betas=(0.9, 0.999), eps: float = 1e-8, warmup: int = 0):
        self.torch = torch
        self.spec = spec
        self.layers, self.encoding = build(torch, spec, flat_params, device)
        self.params = [p for layer in self.layers for p in layer.parameters()]
        # A compiled step takes the learning rate as a tensor: a float would be a constant of the
        # graph, recompiled at each change of the schedule (PyTorch's compiled-optimizer recipe).
        self.optimizer = torch.optim.Adam(self.params, lr=torch.tensor(lr) if compile_mode else lr, betas=betas,
                                          eps=eps)
        self.loss_of, self.optimizer_step = self._loss_of, self.optimizer.step
        if compile_mode:
            self.loss_of = torch.compile(self._loss_of, mode=compile_mode)
            self.optimizer_step = torch.compile(self._optimizer_step, mode=compile_mode)
        self.lr, self.lr_min, self.total, self.warmup = lr, lr_min, total_steps, warmup
        self.coords = torch.from_numpy(coords).to(device)
        self.targets = torch.from_numpy(targets).to(device)
        self.batch_size = batch_size
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.step_index = 0
        self.loss = None

    def _loss_of(self, x, t):
        return self.torch.mean((forward(self.torch, self.spec, self.layers, x, self.encoding) - t) ** 2)

    def _optimizer_step(self):
        self.optimizer.step()

    def step(self):
        torch = self.torch
        lr = learning_rate(self.step_index, self.total, self.lr, self.lr_min, self.warmup)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        if self.batch_size:
            idx = torch.randint(0, self.coords.shape[0], (self.batch_size,), device=self.coords.device,
                                generator=self.generator)
            x, t = self.coords[idx], self.targets[idx]
        else:
            x, t = self.coords, self.targets
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_of(x, t)
        loss.backward()
        self.optimizer_step()
        self.loss = loss
        self.step_index += 1

    def read_loss(self) -> float:
        return float(self.loss.item())

    def render(self, coords):
        with self.torch.no_grad():
            x = self.torch.from_numpy(coords).to(self.coords.device)
            return forward(self.torch, self.spec, self.layers, x, self.encoding)


class BatchedTorchTrainer:
    """N networks of one shape fitted at once, the way PyTorch users batch them: stacked weights
    [N, out, in] and batched matmuls (torch.matmul over the stack), Adam over the stacks, full batch.
    The loss is the sum of the networks' own mean squared errors, so each network gets the gradient
    it would get alone. Starts from our [N, P] parameters."""

    def __init__(self, torch, spec, params, coords, targets, lr, lr_min, total_steps, device="cpu",
                 betas=(0.9, 0.999), eps: float = 1e-8, warmup: int = 0):
        from inr_cli.core.network import frequency_view, layer_views

        self.torch, self.spec = torch, spec
        params = np.asarray(params)

        def tensor(array):
            return torch.from_numpy(np.array(array)).to(device)

        self.weights = [torch.nn.Parameter(tensor(w)) for w, _ in layer_views(spec, params)]
        self.biases = [torch.nn.Parameter(tensor(b)) for _, b in layer_views(spec, params)]
        frequencies = frequency_view(spec, params)
        self.frequencies = None if frequencies is None else tensor(frequencies)
        self.optimizer = torch.optim.Adam([*self.weights, *self.biases], lr=lr, betas=betas, eps=eps)
        self.lr, self.lr_min, self.total, self.warmup = lr, lr_min, total_steps, warmup
        self.coords = tensor(coords)  # [rows, 2], shared by every network
        self.targets = tensor(targets)  # [N, rows, C]
        self.step_index = 0
        self.loss = None

    def forward(self, x):
        torch, spec = self.torch, self.spec
        if self.frequencies is not None:
            angle = 2 * math.pi * torch.matmul(x, self.frequencies.transpose(1, 2))
            x = torch.cat([torch.cos(angle), torch.sin(angle)], dim=2)
        last = len(self.weights) - 1
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            x = torch.matmul(x, weight.transpose(1, 2)) + bias[:, None, :]
            if spec.model == "siren":
                x = x if index == last else torch.sin(spec.omega0 * x)
            elif spec.model == "relu" and index != last:
                x = torch.relu(x)
            else:
                x = torch.sigmoid(x)
        return x

    def step(self):
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.step_index, self.total, self.lr, self.lr_min, self.warmup)
        self.optimizer.zero_grad(set_to_none=True)
        per_network = ((self.forward(self.coords) - self.targets) ** 2).mean(dim=(1, 2))
        per_network.sum().backward()
        self.optimizer.step()
        self.loss = per_network.detach()
        self.step_index += 1

    def read_loss(self) -> np.ndarray:
        return self.loss.cpu().numpy().astype(np.float64)
