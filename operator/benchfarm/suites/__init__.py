"""One pure parser per benchmark suite: output text and parameters in, metrics out."""
