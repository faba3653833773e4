"""The run's console lines, from process 0 only: on stdout progress with speed and ETA,
evaluation results and the run's messages; warnings on stderr."""

import sys

import jax


def print_line(line: str) -> None:
  """One console line on stdout, from process 0 only."""
  if jax.process_index() == 0:
    print(line, flush=True)


def hms(seconds: float) -> str:
  """Seconds as H:MM:SS."""
  seconds = int(round(seconds))
  return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_line(step: int, total: int, summary: dict[str, float], headline: str,
                  rate: float, last: int, speed: str = "") -> str:
  """'step 2/4  loss 2.3026  top1 0.1250  3.10 steps/s  49.6 examples/s  ETA 0:00:01':
  the loss and the task's headline metric (else the first four train metrics), steps/s,
  `speed` (perf.console) and the time to step `last` at `rate`."""
  names = [k for k in ("loss", headline) if f"train_{k}" in summary]
  names = list(dict.fromkeys(names)) or sorted(
      k[len("train_"):] for k in summary if k.startswith("train_"))[:4]
  metrics_text = "  ".join(f"{k} {summary[f'train_{k}']:.4f}" for k in names)
  eta = hms((last - step) / rate) if rate > 0 else "?"
  speed = f"  {speed}" if speed else ""
  return f"step {step}/{total}  {metrics_text}  {rate:.2f} steps/s{speed}  ETA {eta}"


def eval_line(step: int, total: int, evaluation: dict[str, float], headline: str) -> str:
  """'eval step 4/4  top1 0.5000  loss 1.2345 ...': the headline metric first."""
  head = f"eval_{headline}"
  names = sorted(evaluation, key=lambda k: (k != head, k))
  return f"eval step {step}/{total}  " + "  ".join(
      f"{k[len('eval_'):] if k.startswith('eval_') else k} {evaluation[k]:.4f}" for k in names)


def warn(line: str) -> None:
  """One warning line on stderr, from process 0 only."""
  if jax.process_index() == 0:
    print(line, file=sys.stderr, flush=True)
