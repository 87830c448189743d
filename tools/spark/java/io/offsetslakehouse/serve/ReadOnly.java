/*
 * offsets-lakehouse: the read-only SQL endpoint.
 * Licensed under the Apache License, Version 2.0.
 */
package io.offsetslakehouse.serve;

import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ScalaUDF;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.command.CreateViewCommand;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.Function1;
import scala.collection.Iterator;
import scala.runtime.BoxedUnit;

/**
 * A Spark session extension ({@code spark.sql.extensions}) that lets a session only read.
 *
 * <p>Every statement of a guarded session is checked once analysed, before it runs: a query may
 * read the lakehouse's tables (files under a root given to {@link #allowRoot}) and nothing else —
 * no other file, no external source, no user-defined code (Python, Scala or Hive functions,
 * {@code reflect}); of the commands, only those that show or describe something, explain a
 * query, set the session's own settings or namespace, refresh a cached table, or create a
 * temporary view of an allowed query. Everything else — INSERT, UPDATE, DELETE, MERGE, DROP,
 * ALTER, CREATE TABLE, TRUNCATE, OPTIMIZE, VACUUM, RESTORE, writes to paths, ADD JAR, CREATE
 * FUNCTION, CACHE — is refused with a {@link ReadOnlyViolation} naming it, and nothing is done.
 *
 * <p>An allow-list, not a deny-list: a command this class does not know (a future Spark or Delta
 * one) is refused. Sessions are guarded unless exempted ({@link #exempt}): the serving process
 * exempts its own session, which registers the tables; every client's session is a new one, so
 * guarded.
 */
public final class ReadOnly implements Function1<SparkSessionExtensions, BoxedUnit> {

    private static final Set<SparkSession> EXEMPT =
            Collections.newSetFromMap(Collections.synchronizedMap(new WeakHashMap<SparkSession, Boolean>()));
    private static final List<String> ROOTS = new CopyOnWriteArrayList<>();

    /** Files under {@code root} (the lakehouse's) may be read; no others. */
    public static void allowRoot(String root) {
        ROOTS.add(normalise(root));
    }

    private static String normalise(String path) {
        String p = path.replaceFirst("^file://", "").replaceFirst("^file:", "").replaceFirst("^s3://", "s3a://");
        while (p.endsWith("/")) {
            p = p.substring(0, p.length() - 1);
        }
        return p;
    }

    private static boolean underRoots(scala.collection.Seq<Path> paths) {
        Iterator<Path> it = paths.iterator();
        if (!it.hasNext()) {
            return false;
        }
        while (it.hasNext()) {
            String p = normalise(it.next().toString());
            boolean under = false;
            for (String root : ROOTS) {
                under |= p.equals(root) || p.startsWith(root + "/");
            }
            if (!under) {
                return false;
            }
        }
        return true;
    }

    /** Let {@code session} write (the serving process's own session, while it registers tables). */
    public static void exempt(SparkSession session, boolean exempt) {
        if (exempt) {
            EXEMPT.add(session);
        } else {
            EXEMPT.remove(session);
        }
    }

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        Function1<SparkSession, Function1<LogicalPlan, BoxedUnit>> rule = session -> plan -> {
            if (!EXEMPT.contains(session)) {
                String why = refusal(plan);
                if (why != null) {
                    throw new ReadOnlyViolation(why);
                }
            }
            return BoxedUnit.UNIT;
        };
        extensions.injectCheckRule(rule);
        return BoxedUnit.UNIT;
    }

    /** Why {@code plan} may not run in a read-only session, or null when it may. */
    static String refusal(LogicalPlan plan) {
        if (plan instanceof Command && !allowedCommand(plan)) {
            return "this endpoint only reads: " + plan.nodeName() + " is refused";
        }
        return refusalIn(plan);
    }

    private static boolean allowedCommand(LogicalPlan plan) {
        String name = plan.getClass().getSimpleName();
        if (plan instanceof CreateViewCommand) {
            // a temporary view (LocalTempView, GlobalTempView) lives in the client's session only
            return !((CreateViewCommand) plan).viewType().toString().equals("PersistedView");
        }
        return name.startsWith("Show") || name.startsWith("Describe") || name.startsWith("Explain")
                || name.equals("SetCommand") || name.equals("ResetCommand")
                || name.startsWith("SetCatalogAndNamespace") || name.equals("SetNamespaceCommand")
                || name.startsWith("RefreshTable") || name.equals("DropTempViewCommand");
    }

    /** The first thing in the tree (nodes, their expressions, subqueries) a reader may not do. */
    private static String refusalIn(LogicalPlan plan) {
        String name = plan.getClass().getSimpleName();
        if (name.contains("Python") || name.contains("Pandas") || name.contains("InArrow")) {
            return "this endpoint runs no user code: " + plan.nodeName() + " is refused";
        }
        if (plan instanceof LogicalRelation) {
            Object relation = ((LogicalRelation) plan).relation();
            if (!(relation instanceof HadoopFsRelation)
                    || !underRoots(((HadoopFsRelation) relation).location().rootPaths())) {
                return "this endpoint reads the lakehouse's tables only, no other files or sources";
            }
        }
        if (plan instanceof DataSourceV2Relation && ((DataSourceV2Relation) plan).identifier().isEmpty()) {
            return "this endpoint reads the lakehouse's tables only, no other files or sources";
        }
        Iterator<Expression> expressions = plan.expressions().iterator();
        while (expressions.hasNext()) {
            String why = refusalIn(expressions.next());
            if (why != null) {
                return why;
            }
        }
        Iterator<LogicalPlan> children = plan.children().iterator();
        while (children.hasNext()) {
            String why = refusal(children.next());
            if (why != null) {
                return why;
            }
        }
        return null;
    }

    private static String refusalIn(Expression expression) {
        String name = expression.getClass().getSimpleName();
        boolean userCode;
        if (expression instanceof ScalaUDF) {
            // Spark and Delta plan some of their own work as Scala functions; a client's would be
            // a class of its own (Spark Connect's Scala client ships them)
            String fn = ((ScalaUDF) expression).function().getClass().getName();
            userCode = !(fn.startsWith("org.apache.spark.") || fn.startsWith("io.delta."));
        } else {
            userCode = name.contains("Python") || name.contains("UDAF") || name.contains("UDTF")
                    || name.startsWith("Hive") || name.equals("ScalaAggregator") || name.contains("Reflect")
                    || name.equals("JavaUDF");
        }
        if (userCode) {
            return "this endpoint runs no user code: " + expression.prettyName() + " is refused";
        }
        if (expression instanceof SubqueryExpression) {
            String why = refusal(((SubqueryExpression) expression).plan());
            if (why != null) {
                return why;
            }
        }
        Iterator<Expression> children = expression.children().iterator();
        while (children.hasNext()) {
            String why = refusalIn(children.next());
            if (why != null) {
                return why;
            }
        }
        return null;
    }

    /** What a guarded session gets for a statement that would write (or run code). */
    public static final class ReadOnlyViolation extends SecurityException {
        public ReadOnlyViolation(String message) {
            super(message);
        }
    }

    /** Spark makes one by name ({@code spark.sql.extensions}). */
    public ReadOnly() {
    }
}
