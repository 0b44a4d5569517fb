"""Chapters 2 and 3: how a word's cached state carries its sense, in causal models and in a
bidirectional encoder.

study      the plan and the run of both chapters
probes     linear probes of the sense from each layer's states
templates  the probe's distances and the repeat template, with its check (no torch)
"""
