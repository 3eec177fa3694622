"""What the model is given of a conversation: the model-visible history rebuilt from the
user-visible record (`history`), the original messages the history tools read back (`originals`),
and the model requests a turn sent (`model_requests`)."""
