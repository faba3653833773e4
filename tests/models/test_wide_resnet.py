import jax
import numpy as np
import pytest

from experiments import model_stats
from tests.models.tiny import create_tiny, train_step

NAMES = ["wide_resnet28_10", "aa_wide_resnet28_10", "se_wide_resnet28_10", "ge_wide_resnet28_10"]


@pytest.mark.parametrize("name", NAMES)
def test_builds_and_trains_at_tiny_width(name):
  model = create_tiny(name, num_classes=7, depth=10, width=0.1, heads=2, min_key_dims=4,
                      image_size=12)
  x = jax.random.normal(jax.random.key(0), (2, 12, 12, 3))
  logits, grads = train_step(model, x)
  assert logits.shape == (2, 7)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


@pytest.mark.parametrize("name,paper", [("wide_resnet28_10", 36.3e6),
                                        ("aa_wide_resnet28_10", 36.2e6),
                                        ("se_wide_resnet28_10", 36.5e6)])
def test_aa_table1_parameter_counts_within_one_percent(name, paper):
  total, _ = model_stats.count_params(model_stats.build_abstract(name, 100))
  assert abs(total - paper) / paper < 0.01
