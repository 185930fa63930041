"""Other runtimes to compare with, each in its own environment and process (their pins stay out of ours)."""
