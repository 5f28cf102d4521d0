"""A small Keras classifier of Gaussian blobs: a group's own model, outside burst, trained by it."""
