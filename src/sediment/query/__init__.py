"""Queries: a pure planner over a TableState and an executor reading Parquet files."""

from sediment.query.planner import QueryPlan, SubQuery, plan_query

__all__ = ["QueryPlan", "SubQuery", "plan_query"]
