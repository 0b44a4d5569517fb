"""studies/qwen3_switch"""
