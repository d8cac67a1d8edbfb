"""Training: configs, the task data, the trainer, and the run that ties them together.

- run.py: ``train(config, out, resume) -> summary``, what ``liquid-stream train`` runs
- cli.py: the ``train`` / ``evaluate`` commands (thin wrappers); evaluate_vitals.py
- config.py: task YAML, presets, overrides, validation; ``OptimConfig`` / ``TrainConfig``
- tasks.py and data/: the task registry, each task's data splits, metadata and loss
- trainer.py: ``Trainer``, the optimisation loop, checkpoints and exact resume, using
  sampler.py (the data order of each epoch), schedule.py (the learning rate),
  metrics.py (losses, epoch metrics, ``evaluate_model``), runlog.py (metrics.csv,
  steps.csv, TensorBoard, curves.png), rng.py (device, seeding, RNG state) and
  distributed.py (data parallel under torchrun)
"""
