"""`inr train`'s run directory: its folder and lock, metrics.csv, the pictures, and the training of
a run around the core's step loop (training.py); start.py starts or resumes one from the settings."""
