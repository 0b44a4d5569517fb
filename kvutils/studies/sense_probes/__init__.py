"""studies/sense_probes"""
