#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""optim_torch_check.py — a few steps of meshtrain's optimizers, schedules and global-norm
clipping against torch.optim, torch.optim.lr_scheduler and torch.nn.utils.clip_grad_norm_.

Usage:
  optim_torch_check.py specs DATA DIR           write DATA/x.npy (16x6), DATA/y.npy (16x3
                                                 float) and DIR/RUN.json for the run "w0-1" (one step
                                                 at rate 1e-30: the initial weights) and the runs
                                                 CASE-1 and CASE-6 of every case; print the runs
  optim_torch_check.py check W0 DIR RUN...       for each RUN (CASE-STEPS), from the weights W0
                                                 (safetensors), STEPS updates of CASE in PyTorch;
                                                 compare with DIR/RUN.safetensors

The model is dense(8, tanh) -> dense(3) with the mean squared error over the whole data set as
one batch, so every step sees the same 16 examples in both. Each case is a meshtrain optimizer
object and the torch.optim construction that follows the same rule. Where Keras (meshtrain's
convention) and PyTorch differ in where epsilon goes (Adam's "epsilon hat", RMSprop and Adagrad
add it under the square root), epsilon is 1e-12 on both sides so the placement does not show;
Adagrad's initial accumulator is passed to torch (its default is 0, Keras' 0.1). SGD momentum is
compared with a constant rate: Keras keeps lr inside the velocity, PyTorch applies the current lr
to it, which differ once the rate changes. Passes when every tensor's total update
(W1 - W0) agrees within 1e-4 of its largest value.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch_check import read_safetensors  # noqa: E402 (imports torch)

N, D, H, K = 16, 6, 8, 3

# name: (meshtrain optimizer object, torch optimizer name and arguments, schedule, clip)
EPS = 1e-12
CASES = {
    "sgd": ({"name": "sgd", "learning_rate": 0.1}, ("SGD", {"lr": 0.1})),
    "sgd_momentum": ({"name": "sgd", "learning_rate": 0.1, "momentum": 0.9},
                     ("SGD", {"lr": 0.1, "momentum": 0.9})),
    "sgd_nesterov": ({"name": "sgd", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True},
                     ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True})),
    "sgd_weight_decay": ({"name": "sgd", "learning_rate": 0.1, "weight_decay": 0.2},
                         ("SGD", {"lr": 0.1, "weight_decay": 0.2})),
    "sgd_clip_step": ({"name": "sgd", "learning_rate": 0.2, "global_clipnorm": 0.05,
                       "schedule": {"type": "step", "decay_steps": 2, "decay_rate": 0.5}},
                      ("SGD", {"lr": 0.2})),
    "adam": ({"name": "adam", "learning_rate": 0.01, "epsilon": EPS},
             ("Adam", {"lr": 0.01, "eps": EPS})),
    "adam_clip": ({"name": "adam", "learning_rate": 0.01, "epsilon": EPS, "global_clipnorm": 0.05,
                   "beta_1": 0.8, "beta_2": 0.99},
                  ("Adam", {"lr": 0.01, "eps": EPS, "betas": (0.8, 0.99)})),
    "adamw_cosine": ({"name": "adamw", "learning_rate": 0.01, "epsilon": EPS, "weight_decay": 0.1,
                      "schedule": {"type": "cosine", "decay_steps": 4, "warmup_steps": 2,
                                   "alpha": 0.1}},
                     ("AdamW", {"lr": 0.01, "eps": EPS, "weight_decay": 0.1})),
    "rmsprop_step": ({"name": "rmsprop", "learning_rate": 0.01, "rho": 0.8, "epsilon": EPS,
                      "schedule": {"type": "step", "decay_steps": 2, "decay_rate": 0.5}},
                     ("RMSprop", {"lr": 0.01, "alpha": 0.8, "eps": EPS})),
    "adagrad_exponential": ({"name": "adagrad", "learning_rate": 0.1, "epsilon": EPS,
                             "initial_accumulator_value": 0.1,
                             "schedule": {"type": "exponential", "decay_steps": 2,
                                          "decay_rate": 0.5}},
                            ("Adagrad", {"lr": 0.1, "eps": EPS,
                                         "initial_accumulator_value": 0.1})),
    "adam_exponential_staircase": (
        {"name": "adam", "learning_rate": 0.01, "epsilon": EPS,
         "schedule": {"type": "exponential", "decay_steps": 2, "decay_rate": 0.5,
                      "staircase": True, "warmup_steps": 1}},
        ("Adam", {"lr": 0.01, "eps": EPS})),
}


def write_data(d):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(N, D)).astype(np.float32)
    y = rng.normal(size=(N, K)).astype(np.float32)
    np.save(d + "/x.npy", x)
    np.save(d + "/y.npy", y)


def write_spec(out, data, case, steps):
    spec = {
        "name": "optim-torch-check-" + case,
        "seed": 5,
        "batch_size": N,
        "steps": steps,
        "loss": "mse",
        "optimizer": CASES[case][0] if case != "init" else {"name": "sgd",
                                                            "learning_rate": 1e-30},
        "dataset": {"format": "npy", "label_type": "float",
                    "train": {"x": data + "/x.npy", "y": data + "/y.npy"},
                    "test": {"x": data + "/x.npy", "y": data + "/y.npy"}},
        "model": {"input_shape": [D],
                  "layers": [{"type": "dense", "units": H, "activation": "tanh", "name": "h"},
                             {"type": "dense", "units": K, "name": "out"}]},
    }
    json.dump(spec, open(out, "w"), indent=1)


def write_specs(data, d):
    write_data(data)
    write_spec(d + "/w0-1.json", data, "init", 1)
    runs = [f"{case}-{steps}" for case in CASES for steps in (1, 6)]
    for run in runs:
        case, steps = run.rsplit("-", 1)
        write_spec(f"{d}/{run}.json", data, case, int(steps))
    print(" ".join(runs))


def torch_scheduler(torch, opt, sched):
    """The torch.optim.lr_scheduler chain that gives Keras' rate per update."""
    sc = torch.optim.lr_scheduler
    if sched is None:
        return None
    kind, warm = sched["type"], sched.get("warmup_steps", 0)
    ds, rate = sched.get("decay_steps"), sched.get("decay_rate", 0.5)
    if kind == "step" or (kind == "exponential" and sched.get("staircase")):
        main = sc.StepLR(opt, step_size=ds, gamma=rate)
    elif kind == "exponential":
        main = sc.ExponentialLR(opt, gamma=rate ** (1.0 / ds))
    elif kind == "cosine":
        lr = opt.param_groups[0]["lr"]
        main = sc.CosineAnnealingLR(opt, T_max=ds, eta_min=sched.get("alpha", 0.0) * lr)
    else:
        raise SystemExit("unknown schedule " + kind)
    if warm == 0:
        return main
    if warm == 1:  # LinearLR needs total_iters >= 1; one warmup step is the full rate
        ramp = sc.ConstantLR(opt, factor=1.0, total_iters=1)
    else:  # update i < W at lr * (i + 1) / W
        ramp = sc.LinearLR(opt, start_factor=1.0 / warm, end_factor=1.0, total_iters=warm - 1)
    return sc.SequentialLR(opt, [ramp, main], milestones=[warm])


def check(spec_path, w0_path, w1_path, case, steps):
    import torch

    spec = json.load(open(spec_path))
    w0, w1 = read_safetensors(w0_path), read_safetensors(w1_path)
    x = torch.tensor(np.load(spec["dataset"]["train"]["x"]))
    y = torch.tensor(np.load(spec["dataset"]["train"]["y"]))
    params = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in w0.items()}
    mt_opt, (tname, targs) = CASES[case]
    opt = getattr(torch.optim, tname)(list(params.values()), **targs)
    sched = torch_scheduler(torch, opt, mt_opt.get("schedule"))
    clip = mt_opt.get("global_clipnorm")
    lrs, clipped = [], 0
    for _ in range(steps):
        opt.zero_grad()
        h = torch.tanh(x @ params["h.kernel"] + params["h.bias"])
        loss = torch.mean((h @ params["out.kernel"] + params["out.bias"] - y) ** 2)
        loss.backward()
        if clip:
            norm = torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
            clipped += int(norm.item() > clip)
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched is not None:
            sched.step()
    worst = 0.0
    for name in sorted(w0):
        theirs = params[name].detach().numpy().astype(np.float64) - w0[name]
        ours = w1[name].astype(np.float64) - w0[name]
        rel = np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30)
        worst = max(worst, rel)
        print(f"  {name:10s} max|update| {np.abs(theirs).max():.3e}  rel diff {rel:.2e}")
    rates = " ".join(f"{r:.4g}" for r in lrs)
    print(f"{case}: {steps} steps, torch rates [{rates}]"
          + (f", clipped {clipped}/{steps}" if clip else "")
          + f"; worst relative difference {worst:.2e}")
    if clip and clipped == 0:
        print(f"{case}: clipping never engaged; the case does not test it")
        return False
    return worst <= 1e-4


def check_all(w0_path, d, runs):
    """Check every RUN (CASE-STEPS, trained into D/RUN.json and D/RUN.safetensors) in one
    process (torch is imported once); exit 1 naming the failed runs."""
    failed = []
    for run in runs:
        case, steps = run.rsplit("-", 1)
        if not check(f"{d}/{run}.json", w0_path, f"{d}/{run}.safetensors", case, int(steps)):
            failed.append(run)
    if failed:
        sys.exit("failed: " + " ".join(failed))


if __name__ == "__main__":
    if sys.argv[1] == "specs":
        write_specs(sys.argv[2], sys.argv[3])
    else:  # check W0 DIR CASE-STEPS...
        check_all(sys.argv[2], sys.argv[3], sys.argv[4:])
