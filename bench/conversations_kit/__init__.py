"""Parts of bench/conversations.py: the modes it runs and its report."""
