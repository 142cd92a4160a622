"""Code that runs INSIDE a sandbox under the host's system Python (stdlib only).

Nothing here may import `corral` or any third-party package: this directory is bind-mounted
read-only into each sandbox and imported as the top-level package `_agent`.
"""
