"""A local S3 server (SeaweedFS) for tests and demos."""
