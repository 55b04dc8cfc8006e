"""The job a DAG author asks for, the objects built from it, and what becomes of it: spec and
naming, manifests, one adapter per kind, attempts, outcomes and the rules of people's actions.
"""
