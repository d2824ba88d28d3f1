"""Text tasks: problem sets (built-in synthetic arithmetic, or any JSONL file) and their verifiers."""
