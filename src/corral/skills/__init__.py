"""Skills: versioned directories with a SKILL.md, unpacked into sandboxes at /workspace/skills."""
