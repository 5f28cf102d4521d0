"""A small PyTorch regressor of a smooth function: a group's own model, outside burst, trained by it."""
