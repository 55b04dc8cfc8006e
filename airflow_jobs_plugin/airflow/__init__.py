"""Airflow's side of the product: the operator, the sensor, the triggers, the cluster policy
and the command line.
"""
