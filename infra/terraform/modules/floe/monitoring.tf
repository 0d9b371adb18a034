# Alarms and notifications: an SNS topic and CloudWatch alarms on what an
# operator must act on (agents failing readiness, RDS CPU and free storage),
# and the S3 gateway VPC endpoint the operations guide recommends (segment
# traffic stays off the NAT gateway).

resource "aws_sns_topic" "alarms" {
  count = var.enable_alarms ? 1 : 0

  name              = "${var.name}-alarms"
  kms_master_key_id = var.kms_key_arn != null ? var.kms_key_arn : "alias/aws/sns"
  tags              = local.tags
}

resource "aws_sns_topic_subscription" "alarm_email" {
  for_each = var.enable_alarms ? toset(var.alarm_emails) : toset([])

  topic_arn = aws_sns_topic.alarms[0].arn
  protocol  = "email"
  endpoint  = each.value
}

# Agents of a zone not ready (the NLB's /readyz health check failing).
resource "aws_cloudwatch_metric_alarm" "agents_unhealthy" {
  for_each = var.enable_alarms ? toset(local.zones) : toset([])

  alarm_name          = "${var.name}-agents-unhealthy-${each.key}"
  alarm_description   = "Floe agents in ${each.key} fail /readyz (metastore, object store or produce pipeline)"
  namespace           = "AWS/NetworkELB"
  metric_name         = "UnHealthyHostCount"
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 3
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  dimensions = {
    LoadBalancer = aws_lb.kafka.arn_suffix
    TargetGroup  = aws_lb_target_group.zone[each.key].arn_suffix
  }
  alarm_actions = [aws_sns_topic.alarms[0].arn]
  ok_actions    = [aws_sns_topic.alarms[0].arn]
  tags          = local.tags
}

locals {
  db_alarm_dimensions = local.aurora ? { DBClusterIdentifier = aws_rds_cluster.metastore[0].cluster_identifier } : { DBInstanceIdentifier = aws_db_instance.metastore[0].identifier }
  db_alarms = {
    cpu = {
      metric     = "CPUUtilization", statistic = "Average", threshold = var.alarm_db_cpu_percent,
      comparison = "GreaterThanThreshold", description = "metastore CPU above ${var.alarm_db_cpu_percent}% (commit latency follows)"
    }
    storage = {
      metric      = local.aurora ? "FreeLocalStorage" : "FreeStorageSpace", statistic = "Minimum",
      threshold   = var.alarm_db_free_storage_bytes, comparison = "LessThanThreshold",
      description = "metastore free storage below ${var.alarm_db_free_storage_bytes} bytes"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "database" {
  for_each = var.enable_alarms ? local.db_alarms : {}

  alarm_name          = "${var.name}-metastore-${each.key}"
  alarm_description   = each.value.description
  namespace           = "AWS/RDS"
  metric_name         = each.value.metric
  statistic           = each.value.statistic
  period              = 300
  evaluation_periods  = 2
  threshold           = each.value.threshold
  comparison_operator = each.value.comparison
  dimensions          = local.db_alarm_dimensions
  alarm_actions       = [aws_sns_topic.alarms[0].arn]
  ok_actions          = [aws_sns_topic.alarms[0].arn]
  tags                = local.tags
}

# The agents' own metrics (agent/emf.py, namespace var.cloudwatch_namespace):
# produce requests that failed because an upload or a commit failed, and slow
# metastore commits (every acknowledged produce waits for one).
locals {
  agent_alarms = {
    produce-failures = {
      metric      = "ProduceFailures", statistic = "Sum", threshold = 0, periods = 1, period = 300,
      description = "Floe agents failed to upload or commit segments (clients got produce errors)"
    }
    commit-latency = {
      metric      = "CommitLatencyP99", statistic = "Maximum", threshold = var.alarm_commit_latency_ms, periods = 3, period = 60,
      description = "metastore commit p99 above ${var.alarm_commit_latency_ms} ms (produce latency follows)"
    }
  }
  agent_alarm_zones = {
    for pair in setproduct(keys(local.agent_alarms), local.zones) : "${pair[0]}-${pair[1]}" => {
      alarm = local.agent_alarms[pair[0]], zone = pair[1]
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "agent" {
  for_each = var.enable_alarms ? local.agent_alarm_zones : {}

  alarm_name          = "${var.name}-${each.key}"
  alarm_description   = "${each.value.alarm.description} in ${each.value.zone}"
  namespace           = var.cloudwatch_namespace
  metric_name         = each.value.alarm.metric
  statistic           = each.value.alarm.statistic
  period              = each.value.alarm.period
  evaluation_periods  = each.value.alarm.periods
  threshold           = each.value.alarm.threshold
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  dimensions = {
    ClusterId = local.cluster_id
    Zone      = each.value.zone
  }
  alarm_actions = [aws_sns_topic.alarms[0].arn]
  ok_actions    = [aws_sns_topic.alarms[0].arn]
  tags          = local.tags
}

# Compactor passes that failed: its log line "compactor pass failed" becomes a metric.
resource "aws_cloudwatch_log_metric_filter" "compactor_failures" {
  count = var.enable_alarms && var.enable_compactor ? 1 : 0

  name           = "${var.name}-compactor-pass-failures"
  log_group_name = aws_cloudwatch_log_group.floe.name
  pattern        = "\"compactor pass failed\""

  metric_transformation {
    name          = "CompactorPassFailures"
    namespace     = var.cloudwatch_namespace
    value         = "1"
    default_value = "0"
  }
}

resource "aws_cloudwatch_metric_alarm" "compactor_failures" {
  count = var.enable_alarms && var.enable_compactor ? 1 : 0

  alarm_name          = "${var.name}-compactor-pass-failures"
  alarm_description   = "Floe compactor passes failed (merges, retention and GC are not running)"
  namespace           = var.cloudwatch_namespace
  metric_name         = aws_cloudwatch_log_metric_filter.compactor_failures[0].metric_transformation[0].name
  statistic           = "Sum"
  period              = 900
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms[0].arn]
  ok_actions          = [aws_sns_topic.alarms[0].arn]
  tags                = local.tags
}

resource "aws_vpc_endpoint" "s3" {
  count = length(var.s3_endpoint_route_table_ids) > 0 ? 1 : 0

  vpc_id            = var.vpc_id
  service_name      = "com.amazonaws.${local.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = var.s3_endpoint_route_table_ids
  tags              = merge(local.tags, { Name = "${var.name}-s3" })
}
