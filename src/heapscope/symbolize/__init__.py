"""symbolize"""
