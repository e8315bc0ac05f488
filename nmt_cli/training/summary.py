"""A readable architecture summary: module tree, parameters per top-level part, total."""

from __future__ import annotations

from torch import nn

__all__ = ["describe_model"]


def describe_model(model: nn.Module) -> str:
    """The module tree followed by distinct parameters per child and in total.

    Shared (tied) parameters are counted once, under the first child that holds them.
    """
    seen: set[int] = set()
    lines = [repr(model), "", "parameters:"]
    for name, child in model.named_children():
        count = 0
        for parameter in child.parameters():
            if id(parameter) not in seen:
                seen.add(id(parameter))
                count += parameter.numel()
        lines.append(f"  {name:<24} {count:>14,}")
    direct = sum(p.numel() for p in model.parameters(recurse=False) if id(p) not in seen)
    if direct:
        lines.append(f"  {'(own)':<24} {direct:>14,}")
    total = sum(p.numel() for p in model.parameters())
    lines.append(f"  {'total':<24} {total:>14,}")
    return "\n".join(lines)
