"""Workload models: Hugging Face decoder configs and their float64 reference math."""
