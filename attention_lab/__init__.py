"""attention_lab: efficient global-context operators for vision."""
