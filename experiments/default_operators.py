"""The default experiment (digits, attention_cnn) once per global-context operator.

  python -m experiments.default_operators [--vary=model.attention=none,softmax] [--set=...]
"""

from attention_lab.models.attention_cnn import ATTENTIONS
from experiments import sweep

TABLE = sweep.Table(
    "default_operators", "Default experiment (digits, attention_cnn) per operator",
    "configs/default.py", {"model.attention": tuple(ATTENTIONS)},
    columns=(("test top-1", "eval_top1", "{:.4f}"), ("test loss", "eval_loss", "{:.4f}")),
    about="Command: `python -m experiments.default_operators`. Top-1 and loss on the 300 "
          "digits test images after the config's steps.")

if __name__ == "__main__":
  sweep.main_for(TABLE)
