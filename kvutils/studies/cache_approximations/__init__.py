"""studies/cache_approximations"""
