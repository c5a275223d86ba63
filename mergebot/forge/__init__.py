"""Forges: GitHub and Gitea/Forgejo webhooks in, statuses and merges out."""
