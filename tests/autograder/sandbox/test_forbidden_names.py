"""The judge's reading of forbidden names (worker/forbidden.py, static_problem): every entry of the
list is read, and a name the exercise defines itself, or imports from its own package, is its own."""
import pytest

from grader.sandbox.worker.forbidden import CLASSES, FUNCTIONS, static_problem


@pytest.mark.parametrize("path", FUNCTIONS)
def test_every_forbidden_function_is_read_through_torch(path):
    module, _, name = path.rpartition(".")
    assert name in static_problem(f"import {module} as m\ny = m.{name}(q, k, v)\n")
    assert name in static_problem(f"from {module} import {name}\n")


@pytest.mark.parametrize("name", CLASSES)
def test_every_forbidden_class_is_read_through_torch(name):
    assert name in static_problem(f"from torch import nn\nlayer = nn.{name}(8, 2)\n")


def test_the_exercises_own_names_are_not_torchs():
    own = ("def scaled_dot_product_attention(q, k, v):\n    return q\n\n"
           "out = scaled_dot_product_attention(1, 2, 3)\nclass Transformer:\n    pass\n")
    assert static_problem(own) == ""
    relative = "from .attention import scaled_dot_product_attention as sdpa\nsdpa(1, 2, 3)\n"
    assert static_problem(relative) == ""
    assert static_problem("from . import attention\nattention.scaled_dot_product_attention(1, 2, 3)\n") == ""


def test_torchs_function_is_caught_beside_a_function_of_the_same_name():
    source = ("import torch.nn.functional as F\n\ndef scaled_dot_product_attention(q, k, v):\n"
              "    return F.scaled_dot_product_attention(q, k, v)\n")
    assert "forbids torch.nn.functional.scaled_dot_product_attention" in static_problem(source)
