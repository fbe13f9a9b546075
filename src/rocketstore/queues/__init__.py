"""queues"""
