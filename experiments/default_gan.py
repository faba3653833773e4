"""The default GAN experiment (configs/gan/default.py) once per attention variant.

  python -m experiments.default_gan [--variants=none,sa,refined,hamburger,conv]
      [--steps=N] [--workdir=workdirs/default_gan]

For each variant: the digits-FID of the untrained generator (step 0), then the
training run with its periodic evaluations; reported: conditional accuracy
(share of class-k samples the digits classifier labels k), digits-FID (FID in
that classifier's 64-d feature space; lower is better), its ratio to the
untrained G's, IS, KID, k-NN precision and recall, per-class recall, class
diversity (a class's pixel diversity over the real digits', averaged over
classes), wall time (training + evaluations, the classifier's one-off
training excluded; a stopped run resumed with a smaller --steps counts the time
up to its restored checkpoint plus the final evaluation) and CPU time (all
threads of this process; unknown for a resumed run; on a shared machine the
wall time is inflated and CPU time / 2 estimates a quiet 2-core machine's).
Goals: every variant ≥ 90% conditional accuracy and FID ≤ a tenth of the
untrained G's in ≤ 15 minutes on a 2-core CPU; and samples that vary like the
data: recall ≥ 0.5 and class diversity ≥ 0.7.
The digits classifier (configs/default.py) is trained once into
<workdir>/digits_classifier and shared by all variants.

Writes experiments/results/default_gan.{md,json,png} (png: FID over training per
variant) and default_gan_<variant>_samples.png (the last sample grid). Rows of
variants not run this time, and the text below the generated part of the .md,
are kept.
"""

import json
import os
import pathlib
import shutil
import time

from absl import app, flags, logging

from attention_lab.evaluation import generative
from attention_lab.train import dependencies
from attention_lab.train.trainer import Trainer
from configs.gan import default
from experiments import measure

_VARIANTS = flags.DEFINE_list("variants", ["none", "sa", "refined", "hamburger", "conv"],
                              "Attention variants to train.")
_STEPS = flags.DEFINE_integer("steps", 0, "Training steps (0: the config's).")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/default_gan", "Where the runs live.")
_NOTE = flags.DEFINE_string("note", "", "A line for the results (e.g. the machine's load).")

RESULTS = pathlib.Path(__file__).parent / "results"


def variant_config(variant: str, workdir: str, steps: int):
  config = default.get_config()
  config.model.attention = variant
  config.eval.classifier_workdir = os.path.join(workdir, "digits_classifier")
  config.checkpoint_every_steps = 100  # a stopped benchmark resumes close to where it was
  if steps:
    config.num_train_steps = steps
    config.eval_every_steps = min(config.eval_every_steps, steps)
  return config


def run_variant(variant: str, workdir: str, steps: int) -> dict:
  config = variant_config(variant, workdir, steps)
  run_dir = os.path.join(workdir, variant)
  call_start, cpu_start = time.time(), time.process_time()
  trainer = Trainer(config, run_dir, dependencies.resolve(config, run_dir))
  untrained = None
  started = pathlib.Path(run_dir, "started.json")
  resumed_from = int(trainer.state["step"])
  if resumed_from == 0:
    started.write_text(json.dumps({"time": call_start}))
    untrained = trainer.evaluate()
    state_time = call_start
  else:  # resumed (e.g. after a stop): count the time up to the restored checkpoint
    state_time = pathlib.Path(trainer.checkpoints.directory, str(resumed_from)).stat().st_mtime
  summary = trainer.run()
  if trainer.preempted:  # SIGTERM: the step reached is saved; a re-run resumes there
    raise SystemExit(f"default_gan: {variant} stopped at step {int(trainer.state['step'])}; "
                     "run the same command again to resume it")
  cpu = time.process_time() - cpu_start if resumed_from == 0 else None
  wall = (state_time - json.loads(started.read_text())["time"]) + (time.time() - call_start)
  with open(os.path.join(run_dir, "fid_history.json")) as f:
    history = json.load(f)
  untrained = untrained or history[0]
  images = sorted(pathlib.Path(run_dir, "images").glob("samples_*.png"))
  if images:
    shutil.copy(images[-1], RESULTS / f"default_gan_{variant}_samples.png")
  fid, fid0 = summary["eval_fid"], untrained["eval_fid"]
  acc = summary["eval_conditional_accuracy"]
  return dict(variant=variant, steps=config.num_train_steps, batch=config.batch_size,
              width=config.model.width, learning_rates=(config.g_optimizer.learning_rate,
                                                        config.d_optimizer.learning_rate),
              ema_decay=config.ema_decay, mode_seeking=config.mode_seeking,
              ema_start_step=config.ema_start_step, conditional_accuracy=acc, fid=fid,
              untrained_fid=fid0, fid_ratio=fid / fid0, inception_score=summary["eval_is"],
              kid=summary["eval_kid"], precision=summary["eval_precision"],
              recall=summary["eval_recall"], class_recall=summary["eval_class_recall"],
              class_diversity=summary["eval_class_diversity"], wall_s=wall, cpu_s=cpu,
              history=history,
              meets_goal=bool(acc >= 0.9 and fid <= fid0 / 10 and wall <= 900),
              meets_diversity_goal=bool(summary["eval_recall"] >= 0.5
                                        and summary["eval_class_diversity"] >= 0.7))


def _score(row, key) -> str:
  return f"{row[key]:.3f}" if key in row else "—"  # rows measured before these scores existed


def _cpu(row) -> str:
  return f"{row['cpu_s'] / 60:.1f} min" if row.get("cpu_s") else "—"  # unknown: resumed run


def _ema(row) -> str:
  if not row.get("ema_decay"):
    return "no EMA"
  return (f"G evaluated with an EMA of its weights (decay {row['ema_decay']:g} from step "
          f"{row['ema_start_step']})")


def _mode_seeking(row) -> str:
  return f"{row.get('mode_seeking', 0.0):g}"  # 0 for rows measured before the term existed


def markdown(rows, machine: str, classifier: dict, note: str) -> str:
  lines = [
      "# Default GAN experiment: conditional SAGAN on digits, per attention variant", "",
      f"Measured on {machine}. Command: `python -m experiments.default_gan`. {note}".strip(), "",
      "configs/gan/default.py: G and D at 32×32 (BigGAN 32² layout, width "
      f"{rows[0]['width'] if rows else '?'}), context module at 16², hinge loss, Adam (0, 0.9), "
      f"TTUR {' / '.join(f'{lr:g}' for lr in rows[0]['learning_rates']) if rows else '?'}, "
      f"batch {rows[0]['batch'] if rows else '?'}, {_ema(rows[0]) if rows else '?'}, "
      f"MSGAN's mode-seeking term λ {_mode_seeking(rows[0]) if rows else '?'}. Scores "
      "over 2,000 "
      "class-balanced samples from a fixed key, in the feature space of the digits classifier "
      "(configs/default.py, "
      f"test top-1 {classifier.get('eval_top1', float('nan')):.3f}); digits-FID lower is better. "
      "Goal: conditional accuracy ≥ 0.90 and FID ≤ untrained FID / 10 within 15 minutes.", "",
      "Diversity goal: recall ≥ 0.5 and class diversity (pixel diversity within a class over "
      "the real digits') ≥ 0.7.", "",
      "| attention | steps | cond. accuracy | digits-FID | untrained G's FID | ratio | IS | KID | "
      "precision | recall | class recall | class diversity | wall time | CPU time | goal | "
      "diversity goal |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  met = lambda ok: "met" if ok else "not met"  # noqa: E731
  for r in rows:
    lines.append(
        f"| {r['variant']} | {r['steps']} | {r['conditional_accuracy']:.3f} | {r['fid']:.3f} | "
        f"{r['untrained_fid']:.2f} | {r['fid_ratio']:.3f} | {r['inception_score']:.2f} | "
        f"{r['kid']:.4f} | {_score(r, 'precision')} | {_score(r, 'recall')} | "
        f"{_score(r, 'class_recall')} | {_score(r, 'class_diversity')} | "
        f"{r['wall_s'] / 60:.1f} min | {_cpu(r)} | {met(r['meets_goal'])} | "
        f"{met(r['meets_diversity_goal']) if 'meets_diversity_goal' in r else '—'} |")
  grids = [r["variant"] for r in rows
           if (RESULTS / f"default_gan_{r['variant']}_samples.png").exists()]
  lines += ["", "FID over training: [default_gan.png](default_gan.png)" + (
      "; last sample grids (columns = classes 0-9): " + ", ".join(
          f"[{v}](default_gan_{v}_samples.png)" for v in grids) if grids else ""), ""]
  return "\n".join(lines)


def main(argv):
  del argv
  workdir = _WORKDIR.value
  RESULTS.mkdir(parents=True, exist_ok=True)
  json_path = RESULTS / "default_gan.json"
  previous = json.loads(json_path.read_text()) if json_path.exists() else {}
  md_path = RESULTS / "default_gan.md"
  # The analysis written below the generated part of an earlier results file is kept.
  analysis = md_path.read_text().partition("\nFID over training:")[2].partition("\n")[2] \
      if md_path.exists() else ""
  rows = {r["variant"]: r for r in previous.get("rows", [])}
  start = time.time()
  ev = variant_config("none", workdir, _STEPS.value).eval
  classifier = dependencies.trained(dependencies.load_config_file(ev.classifier_config),
                                    ev.classifier_workdir)
  classifier_s = time.time() - start
  classifier = classifier.evaluate()
  for variant in _VARIANTS.value:
    logging.info("Training variant %s", variant)
    rows[variant] = run_variant(variant, workdir, _STEPS.value)
    ordered = [rows[v] for v in ("none", "sa", "refined", "hamburger", "conv") if v in rows]
    machine = measure.machine_line(measure.machine())
    json_path.write_text(json.dumps(
        {"rows": ordered, "classifier": classifier, "classifier_s": classifier_s,
         "machine": machine, "commit": measure.commit(), "note": _NOTE.value}, indent=1))
    md_path.write_text(markdown(ordered, machine, classifier, _NOTE.value) + analysis)
    generative.plot_history({r["variant"]: r["history"] for r in ordered},
                          str(RESULTS / "default_gan.png"))
    print(markdown(ordered, machine, classifier, _NOTE.value), flush=True)


if __name__ == "__main__":
  app.run(main)
