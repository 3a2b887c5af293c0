"""Graphs as models: acyclicity, the DAG-problem protocol, DAG spaces, CPDAGs and DAG metrics."""
