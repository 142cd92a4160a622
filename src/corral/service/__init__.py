"""Application services: validate against the store, build wire objects; no HTTP here."""
