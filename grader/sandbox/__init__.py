"""The boundary between the trusted judge and the untrusted worker that runs student code."""
