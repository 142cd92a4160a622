"""Files: content-addressed blobs, file metadata, and session outputs collected from sandboxes."""
