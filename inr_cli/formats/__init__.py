"""File formats: pixel CSV, images, checkpoints, exports, atomic writes."""
