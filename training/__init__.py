"""Training: the trainer, the data loaders and the task configs."""
