"""Model providers behind the `ModelClient` protocol."""
